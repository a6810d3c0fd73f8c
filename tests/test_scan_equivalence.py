"""The block-level search finds exactly the lines the previous engine found (tests/reference_scan.py,
its scanner verbatim), with the same line numbers and stats summaries, on every fixture and on
generated sparse, dense, blank and mixed logs, plus one thing it did not: the source line under
each traceback frame; and the sequential and parallel readers agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor import pipeline
from oomdoctor.cli import cli
from oomdoctor.read import parallel
from oomdoctor.read.scan import (
    FRAME_HEAD,
    RETRACTION,
    RETRACTIONS_KEPT,
    SMALL_INPUT,
    STATS_HEADS,
    BlockScan,
    Counted,
    Scanner,
)
from tests import reference_scan
from tests.conftest import FIXTURES
from tests.test_scan import _gen_log

ANCHORS = sorted({a for m in pipeline.matchers(pipeline.load_rules()) for a in m.anchors if a})


def _blocks(data: bytes, size: int) -> list[bytes]:
    """Cut like the reader: whole lines, about ``size`` bytes each."""
    out, pos = [], 0
    while pos < len(data):
        cut = data.rfind(b"\n", pos, pos + size) + 1
        if cut <= pos:
            cut = data.find(b"\n", pos + size) + 1 or len(data)
        out.append(data[pos:cut])
        pos = cut
    return out


def _counted(scanner: Scanner, candidates: dict[int, bytes]) -> list[Counted]:
    """What the scanner should count of the previous engine's candidates: in each run of
    retraction lines with no other tested line between them (stats lines are only context),
    the lines after the first RETRACTIONS_KEPT and before the last. A retraction line whose
    envelope holds an anchor is tested as any other line."""
    if not scanner._retractions_thin:
        return []
    out: list[Counted] = []
    run: list[tuple[int, int]] = []
    for index, line in [*sorted(candidates.items()), (-1, b"")]:
        if b" batch" in line:
            continue
        m = RETRACTION.fullmatch(line)
        envelope = line[: line.find(b"KV cache pool")]
        if m is not None and not any(a.encode() in envelope for a in ANCHORS):
            run.append((index, int(m[1])))
            continue
        if len(run) > RETRACTIONS_KEPT + 1:
            middle = run[RETRACTIONS_KEPT:-1]
            out.append(Counted(run[-1][0], len(middle), sum(n for _, n in middle)))
        run = []
    return out


def _same(data: bytes, block_size: int, force_regex: bool) -> None:
    """The same scans, except that in each run of retraction lines the scanner passes the first
    RETRACTIONS_KEPT and the last and counts the others, and passes retraction lines without
    their stats context (other candidates keep theirs)."""
    new, old = Scanner(ANCHORS), reference_scan.Scanner(ANCHORS)
    if force_regex:  # the alternation, as on big inputs
        for s in (new, old):
            s._search_for(b"x" * (SMALL_INPUT + 1))
    for block in _blocks(data, block_size):
        got, want = new.scan(block), old.scan(block)
        assert (got.newlines, got.stats) == (want.newlines, want.stats)
        every, kept = dict(want.candidates), dict(got.candidates)
        assert list(got.retractions) == _counted(new, every)
        # the one addition: the source line printed under a traceback frame comes with it
        code = {i for i in kept if i not in every}
        assert all(i - 1 in kept and FRAME_HEAD in kept[i - 1] for i in code), code
        kept = {i: line for i, line in kept.items() if i not in code}
        assert kept.items() <= every.items()
        tested = {i: line for i, line in every.items() if b" batch" not in line}
        dropped = {i for i in tested if i not in kept}
        assert all(RETRACTION.fullmatch(tested[i]) for i in dropped)  # retractions only
        assert len(dropped) == sum(c.lines for c in got.retractions)
        assert all(c.after in kept for c in got.retractions)
        stats = sorted((i, line) for i, line in every.items() if b" batch" in line)
        for index, line in kept.items():  # other candidates keep their context
            if b" batch" in line or (new._retractions_thin and RETRACTION.fullmatch(line)):
                continue
            for head in STATS_HEADS:
                before = [i for i, s in stats if i < index and head in s]
                assert not before or before[-1] in kept


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    gen = _gen_log()
    tmp = tmp_path_factory.mktemp("equiv")
    out = {}
    for name, dense in (("sparse", False), ("dense", True)):
        path = tmp / f"{name}.log"
        gen.write(path, target_bytes=2 << 20, dense=dense)
        out[name] = path.read_bytes()
    big = tmp / "dense-big.log"  # 1 MiB blocks with retractions only: they are counted
    gen.write(big, target_bytes=6 << 20, dense=True)
    out["dense-big"] = big.read_bytes()
    half = len(out["dense"]) // 2
    cut = out["dense"].rfind(b"\n", 0, half) + 1
    out["blank"] = b"\n" * 300_000 + out["sparse"][-4000:]
    out["mixed"] = out["dense"][:cut] + b"\n\n   \n\t\n" * 20_000 + out["dense"][cut:]
    return out


@pytest.mark.parametrize("name", ["sparse", "dense", "blank", "mixed"])
@pytest.mark.parametrize("force_regex", [False, True])
def test_generated_logs_give_the_same_scans(
    generated: dict[str, bytes], name: str, force_regex: bool
) -> None:
    for size in (1 << 16, 1 << 20):
        _same(generated[name], size, force_regex)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.log")), ids=lambda p: p.name)
def test_every_fixture_gives_the_same_scans(path: Path) -> None:
    data = path.read_bytes()
    _same(data, 1 << 16, force_regex=False)
    _same(data, 1 << 12, force_regex=True)


def test_sequential_and_parallel_reports_agree(
    generated: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "dense.log"
    log.write_bytes(generated["dense"] * 3)

    def report() -> dict[str, object]:
        result = CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json", "--no-gpu"])
        data = json.loads(result.stdout)
        return {k: data[k] for k in ("verdict", "actions", "findings", "stats", "timeline")}

    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 40)
    sequential = report()
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "CHUNK", 1 << 20)
    assert parallel.usable(log)
    assert report() == sequential


class _Previous(reference_scan.Scanner):
    """The previous engine's scanner, giving today's BlockScan (nothing counted, all passed)."""

    def scan(self, block: bytes) -> BlockScan:  # type: ignore[override]
        return BlockScan(*super().scan(block))


def _report(log: Path) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json", "--no-gpu"])
    data = json.loads(result.stdout)
    keys = ("input", "verdict", "actions", "findings", "stats", "timeline", "budget", "notices")
    return {k: data[k] for k in keys}


@pytest.mark.parametrize("name", ["sparse", "dense", "mixed", "dense-big"])
def test_the_report_is_the_previous_engines(
    generated: dict[str, bytes], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: counting retraction lines in the scanner changes no verdict, evidence line,
    stats figure or timeline point."""
    from oomdoctor.extract import facts

    log = tmp_path / f"{name}.log"
    log.write_bytes(generated[name])
    if name == "dense-big":
        scanner = Scanner(ANCHORS)
        scanner._search_for(b"x" * (SMALL_INPUT + 1))
        assert any(scanner.scan(b).retractions for b in _blocks(generated[name], 1 << 20))
    today = _report(log)
    monkeypatch.setattr(facts, "Scanner", _Previous)
    assert _report(log) == today
