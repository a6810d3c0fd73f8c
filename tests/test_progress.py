"""The progress bar: only on a terminal, only for big inputs, and it never changes the result."""

from __future__ import annotations

import io
from pathlib import Path

from oomdoctor import pipeline
from oomdoctor.read import progress

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sglang-0.5.10" / "runtime-prefill-oom.log"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_stderr_is_not_a_terminal() -> None:
    assert progress.for_inputs([str(FIXTURE)], io.StringIO()) is None


def test_small_input_on_a_terminal_draws_nothing() -> None:
    term = Terminal()
    bar = progress.for_inputs([str(FIXTURE)], term)
    assert bar is not None and bar.total == FIXTURE.stat().st_size
    bar(FIXTURE.stat().st_size)
    bar.close()
    assert term.getvalue() == ""


def test_big_file_draws_a_bar_with_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    with big.open("wb") as fh:
        fh.truncate(progress.THRESHOLD + 1)  # sparse: the size is what counts
    term = Terminal()
    bar = progress.for_inputs([str(big)], term)
    assert bar is not None and bar.total == progress.THRESHOLD + 1
    bar(1 << 20)
    bar.close()
    assert "reading" in term.getvalue()
    assert "50.0 MB" in term.getvalue()


def test_pipe_of_unknown_size_starts_after_the_threshold() -> None:
    bar = progress.Bar(None, Terminal())
    bar(progress.THRESHOLD - 1)
    assert bar._progress is None
    bar(2)
    assert bar._progress is not None
    bar.close()


def test_progress_counts_every_input_byte(tmp_path: Path) -> None:
    seen: list[int] = []
    rules = pipeline.load_rules()
    plain = pipeline.read([str(FIXTURE)], rules, progress=seen.append)
    assert sum(seen) == FIXTURE.stat().st_size
    seen.clear()
    gz = tmp_path / "log.gz"
    import gzip

    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    packed = pipeline.read([str(gz)], rules, progress=seen.append)
    assert sum(seen) == gz.stat().st_size  # compressed bytes: the bar's total is the file size
    assert packed.failures == plain.failures
