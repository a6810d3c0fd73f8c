"""Excerpt first: a fixture family is not done until what users paste of it gives the same verdict.

For every fixture whose log holds a traceback, three excerpts are diagnosed on their own:

- the suffix from its first traceback frame (the header and everything before it dropped);
- its last 12 lines;
- the PyTorch OOM message re-wrapped at 80 columns by hand (one break inside a word, one between a
  number and its unit), with the envelope only on the first piece.

Each must get the category of the whole log. The only exceptions are excerpts that cut away a line
the whole log's verdict was decided on (the evidence lines of its winning rule): they are skipped
with the lines named, so the documentation of every exception is the test output itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oomdoctor import pipeline
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.gpu.loaders import load
from oomdoctor.report.build import build_report
from tests.conftest import FIXTURES, SIDECARS, fixture_snapshots, load_toml
from tests.conftest import fixture_log as _log

LAST_LINES = 12
WRAP = 80
_FRAME = re.compile(rb'File "[^"]+", line \d+, in ')


def _lines(path: Path) -> list[bytes]:
    """The log's lines as an editor numbers them (a tqdm `\r` does not end a line)."""
    return [line + b"\n" for line in path.read_bytes().split(b"\n")]


def _with_traceback(sidecar: Path) -> bool:
    log = _log(sidecar)
    return log.is_file() and _FRAME.search(log.read_bytes()) is not None


CASES = [s for s in SIDECARS if _with_traceback(s)]
IDS = [str(s.relative_to(FIXTURES)).replace(".expect.toml", "") for s in CASES]


@pytest.fixture(scope="module")
def run_excerpt(
    rules: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Path, list[bytes]], Diagnosis]:
    root = tmp_path_factory.mktemp("excerpts")
    counter = iter(range(1 << 30))

    def run(sidecar: Path, lines: list[bytes]) -> Diagnosis:
        path = root / f"excerpt-{next(counter)}.log"
        path.write_bytes(b"".join(lines))
        return pipeline.run([str(path)], rules, gpu=_gpu(sidecar))

    return run


def _gpu(sidecar: Path) -> Any:
    names = fixture_snapshots(sidecar)
    return load(list(names)) if names else None


def _deciding_lines(diagnose: Callable[..., Diagnosis], sidecar: Path) -> set[int]:
    whole = diagnose(_log(sidecar), fixture_snapshots(sidecar))
    return {e.line.number for f in whole.findings[:1] for e in f.evidence}


def _check(
    sidecar: Path,
    lines: list[bytes],
    first_line: int,
    diagnose: Callable[..., Diagnosis],
    run_excerpt: Callable[[Path, list[bytes]], Diagnosis],
) -> None:
    expected = load_toml(sidecar)["category"]
    window = set(range(first_line, first_line + len(lines)))
    cut = sorted(_deciding_lines(diagnose, sidecar) - window)
    got = run_excerpt(sidecar, lines).verdict
    if got.category != expected and cut:
        pytest.skip(f"the excerpt cuts away the deciding line(s) {cut[:6]} of the whole log")
    assert got.category == expected, f"{got.rule}: {got.summary}"


@pytest.mark.parametrize("sidecar", CASES, ids=IDS)
def test_headerless_traceback(
    sidecar: Path,
    diagnose: Callable[..., Diagnosis],
    run_excerpt: Callable[[Path, list[bytes]], Diagnosis],
) -> None:
    lines = _lines(_log(sidecar))
    first = next(i for i, line in enumerate(lines) if _FRAME.search(line))
    _check(sidecar, lines[first:], first + 1, diagnose, run_excerpt)


@pytest.mark.parametrize("sidecar", CASES, ids=IDS)
def test_last_lines(
    sidecar: Path,
    diagnose: Callable[..., Diagnosis],
    run_excerpt: Callable[[Path, list[bytes]], Diagnosis],
) -> None:
    lines = _lines(_log(sidecar))
    start = max(len(lines) - LAST_LINES, 0)
    _check(sidecar, lines[start:], start + 1, diagnose, run_excerpt)


_MESSAGE = re.compile(r"(?:[\w.]*OutOfMemoryError: )?(?:CUDA|HIP) out of memory")


def rewrap(line: bytes, width: int = WRAP) -> list[bytes]:
    """The message of a line broken by hand into pieces of about ``width`` characters: mostly at
    spaces, once inside a word and once between a number and its unit. The envelope stays on the
    first piece; the continuation pieces carry nothing of it."""
    whole = line.decode("utf-8").rstrip("\r\n")
    m = _MESSAGE.search(whole)
    prefix, text = (whole[: m.start()], whole[m.start() :]) if m else ("", whole)
    pieces: list[str] = []
    inside_word = unit_split = False
    while len(text) > width:
        cut = text.rfind(" ", 0, width)
        unit = re.search(r"\d (?:GiB|MiB)", text[width // 2 : width])
        if not unit_split and unit:
            cut = width // 2 + unit.start() + 1
            unit_split = True
        elif not inside_word and cut > 10:
            cut -= 3  # three letters into the next word
            inside_word = True
        if cut <= 0:
            cut = width
        pieces.append(text[:cut].rstrip(" "))
        text = text[cut:].lstrip(" ")
    pieces.append(text)
    pieces[0] = prefix + pieces[0]
    return [p.encode() + b"\n" for p in pieces]


_OOM_CASES = [
    s for s in SIDECARS if "oom" in load_toml(s) and b"out of memory. Tried" in _log(s).read_bytes()
]


@pytest.mark.parametrize(
    "sidecar", _OOM_CASES, ids=[str(s.relative_to(FIXTURES)) for s in _OOM_CASES]
)
def test_rewrapped_message(
    sidecar: Path,
    report_of: Callable[..., dict[str, Any]],
    run_excerpt: Callable[[Path, list[bytes]], Diagnosis],
) -> None:
    """The whole log with its OOM message re-wrapped keeps the category and the message's numbers."""
    whole = report_of(_log(sidecar), fixture_snapshots(sidecar))
    where = whole["failure"]["where"]["line"]
    lines = _lines(_log(sidecar))
    if len(lines[where - 1]) <= WRAP:
        pytest.skip("the OOM message already fits on one line")
    wrapped = [*lines[: where - 1], *rewrap(lines[where - 1]), *lines[where:]]
    rep = build_report(run_excerpt(sidecar, wrapped))
    assert rep["verdict"]["category"] == load_toml(sidecar)["category"], rep["verdict"]["summary"]
    for key in ("requested_gib", "free_gib", "total_gib", "this_process_gib"):
        assert rep["failure"]["oom"][key] == whole["failure"]["oom"][key], key
