"""The fast path: block scanning, stats summaries and the parallel reader give the same incident
as reading line by line would, whatever the block size or the number of workers."""

from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path
from types import ModuleType

import pytest

from oomdoctor import pipeline
from oomdoctor.model import Incident
from oomdoctor.read import parallel
from oomdoctor.read.scan import STATS_HEADS, Scanner
from oomdoctor.read.trie import TRIE_DEPTH, alternation

ROOT = Path(__file__).parent.parent


def _gen_log() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_log", ROOT / "bench" / "gen_log.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def served_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3 MB generated 0.5.10 log: startup, serving on two DP ranks, retractions, the crash."""
    path = tmp_path_factory.mktemp("logs") / "served.log"
    _gen_log().write(path, target_bytes=3 << 20)
    return path


def _summary(incident: Incident) -> dict[str, object]:
    s = incident.stats
    return {
        "lines": incident.lines_read,
        "failures": [(f.kind, f.line.number, f.ranks, f.site, f.phase) for f in incident.failures],
        "ranks": [(r.rank, r.pre and r.pre.value, r.post and r.post.value) for r in incident.ranks],
        "prefill": s.prefill_lines,
        "decode": s.decode_lines,
        "peak": s.peak_token_usage,
        "retractions": (s.retractions, s.retracted_requests),
        "first_retraction": s.first_retraction and s.first_retraction.number,
        "last_decode": s.last_decode and s.last_decode.line.number,
        "last_prefill": s.last_prefill and s.last_prefill.line.number,
        "timeline": s.timeline,
        "fact_counts": dict(incident.fact_counts),
    }


def _naive(path: Path) -> dict[str, object]:
    """What a line-by-line reading of the stats lines says."""
    text = path.read_text()
    lines = text.splitlines()
    usage = [float(m) for m in re.findall(r"token usage: (\d\.\d\d)", text)]
    return {
        "lines": len(lines),
        "prefill": sum("Prefill batch" in line for line in lines),
        "decode": sum("Decode batch" in line for line in lines),
        "peak": max(usage),
        "retractions": sum("Retract requests" in line for line in lines),
        "last_decode": max(i for i, line in enumerate(lines, 1) if "Decode batch" in line),
        "last_prefill": max(i for i, line in enumerate(lines, 1) if "Prefill batch" in line),
    }


def test_stats_summaries_match_a_line_by_line_count(served_log: Path) -> None:
    got = _summary(pipeline.read([str(served_log)], pipeline.load_rules()))
    want = _naive(served_log)
    assert got["lines"] == want["lines"]
    assert got["prefill"] == want["prefill"] and got["decode"] == want["decode"]
    assert got["peak"] == want["peak"]
    assert got["timeline"].peak_usage == want["peak"]  # type: ignore[attr-defined]
    assert got["retractions"][0] == want["retractions"]  # type: ignore[index]
    assert got["last_decode"] == want["last_decode"]
    assert got["last_prefill"] == want["last_prefill"]
    assert [f[0] for f in got["failures"]] == ["cuda_oom"]  # type: ignore[union-attr]


def test_parallel_reader_gives_the_same_incident(
    served_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = pipeline.load_rules()
    sequential = _summary(pipeline.read([str(served_log)], rules))
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "CHUNK", 1 << 20)  # one range per block: 3 workers
    if not parallel.usable(served_log):
        pytest.skip("no fork or a single core here")
    seen: list[int] = []
    forked = _summary(pipeline.read([str(served_log)], rules, progress=seen.append))
    assert forked == sequential
    assert sum(seen) == served_log.stat().st_size


def test_block_boundaries_do_not_change_what_is_found(served_log: Path) -> None:
    data = served_log.read_bytes()
    scanner = Scanner(a for m in pipeline.matchers(pipeline.load_rules()) for a in m.anchors)
    whole = scanner.scan(data)
    found: list[bytes] = []
    prefill = decode = base = 0
    pos = 0
    for size in (7_000, 65_537, 300_001) * 100:  # odd sizes, cut at the last newline before
        if pos >= len(data):
            break
        cut = data.rfind(b"\n", pos, pos + size) + 1 or len(data)
        part = scanner.scan(data[pos:cut])
        found += [line for _, line in part.candidates]
        if part.stats:
            prefill += part.stats.prefill
            decode += part.stats.decode
        base += part.newlines
        pos = cut
    assert base == whole.newlines
    assert whole.stats is not None
    assert (prefill, decode) == (whole.stats.prefill, whole.stats.decode)
    # Context lines (the stats line before a candidate) depend on the block; real finds do not.
    real = {line for line in found if all(h not in line for h in STATS_HEADS)}
    assert real == {line for _, line in whole.candidates if all(h not in line for h in STATS_HEADS)}


def test_a_giant_line_inside_a_worker_range_is_cut_like_the_sequential_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = ROOT / "fixtures" / "sglang-0.5.10" / "runtime-prefill-oom.log"
    text = fixture.read_bytes()
    log = tmp_path / "giant.log"
    with log.open("wb") as fh:
        for i in range(40):
            fh.write(text)
            if i == 20:
                fh.write(b"x" * (3 << 20) + b"\n")  # a 3 MiB line, over MAX_LINE
    rules = pipeline.load_rules()
    sequential = pipeline.read([str(log)], rules)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "CHUNK", 1 << 20)
    if not parallel.usable(log):
        pytest.skip("no fork or a single core here")
    forked = pipeline.read([str(log)], rules)
    assert _summary(forked) == _summary(sequential)
    assert any("longer than 1 MiB were cut" in n for n in forked.notices)
    assert forked.notices == sequential.notices


STATS_RULE = """
id = "busy-decode"
category = "not_oom"
priority = 1
confidence = 0.1
title = "decode batches seen"
advice = "none"

[docs]
what = "x"
why = "x"
remedy = "x"
false_positives = ["x"]
references = ["x"]

[[patterns]]
name = "decode"
anchor = "{anchor}"
regex = "Decode batch, #running-req: (?P<n>\\\\d+)"

[when]
all = ["pattern.busy-decode.decode"]

[fixtures]
fire = ["a.log"]
silent = ["a.log"]
"""


@pytest.mark.parametrize(
    ("anchor", "every_line"), [("#running-req", True), ("Decode batch", False)]
)
def test_what_a_user_pattern_on_stats_lines_sees(
    served_log: Path, tmp_path: Path, anchor: str, every_line: bool
) -> None:
    """As the README says: anchored on the stats head, only some stats lines reach a pattern;
    anchored on another literal of the line, every one does."""
    (tmp_path / "busy.toml").write_text(STATS_RULE.format(anchor=anchor))
    (tmp_path / "a.log").write_text("")
    rules = pipeline.load_rules([tmp_path])
    incident = pipeline.read([str(served_log)], rules)
    seen = incident.fact_counts.get("pattern:busy-decode.decode", 0)
    decode_lines = _naive(served_log)["decode"]
    if every_line:
        assert seen == decode_lines
    else:
        assert 0 < seen < decode_lines


def test_the_trie_alternation_finds_what_the_words_find() -> None:
    """Words that are prefixes of each other, regex metacharacters, non-ASCII bytes, words
    longer than the trie's depth: the first match starts where the first word occurs."""
    rng = random.Random(15)
    alphabet = b"ab.*(|)?[]\\\xc3\xa9 "
    for _ in range(400):
        words = {
            bytes(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 12))
        }
        words.add(b"a" * (TRIE_DEPTH + 1))
        words |= {w[: rng.randint(1, len(w))] for w in list(words)[:3]}  # prefixes of words
        pattern = re.compile(alternation(sorted(words)))
        for _ in range(20):
            text = bytes(rng.choices(alphabet, k=rng.randint(0, 40)))
            if rng.random() < 0.1:
                text += b"a" * (TRIE_DEPTH + 1)
            first = min((i for w in words if (i := text.find(w)) >= 0), default=None)
            m = pattern.search(text)
            assert (m.start() if m else None) == first, (words, text)


def test_the_anchor_alternation_is_a_trie() -> None:
    anchors = [a.encode() for m in pipeline.matchers(pipeline.load_rules()) for a in m.anchors]
    flat = b"|".join(re.escape(a) for a in anchors if a)
    assert len(alternation(a for a in anchors if a)) < len(flat)
