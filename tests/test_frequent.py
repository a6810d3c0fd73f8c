"""Counted sub-blocks (read/frequent.py) find what the line-by-line path finds: random mixes of
stats, access, retraction and repeated lines, with the confusers that could be counted twice or
hide an anchor, give the previous engine's candidates (tests/test_scan_equivalence.py's rules)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.read.frequent import QUIET_AFTER, Frequent
from oomdoctor.read.scan import SMALL_INPUT, SUB_BLOCK, Scanner
from tests.test_scan import _gen_log
from tests.test_scan_equivalence import ANCHORS, _blocks, _same

ENV = "[2026-03-14 09:30:{s:02d} DP{r} TP{t}] "
RETRACT = (
    "KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: 3, "
    "#new_token_ratio: 0.5000 -> 0.6000"
)
FLUSHED = "Cache flushed successfully!"
LINES = {
    "decode": ENV + "Decode batch, #running-req: 8, #token: 100, token usage: 0.{n:02d}, "
    "cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0",
    "prefill": ENV + "Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token "
    "usage: 0.{n:02d}, #running-req: 8, #queue-req: 2, cuda graph: False",
    "access": '[2026-03-14 09:30:{s:02d}] INFO:     10.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK',
    "retraction": ENV + RETRACT,
    "retraction-old": ENV + RETRACT.replace("#new_tokens_gained: 3, ", ""),
    "flushed": ENV + FLUSHED,
    # confusers
    "flushed-anchor-envelope": "[out of memory] " + FLUSHED,
    "flushed-bare": FLUSHED,
    "flushed-twice": ENV + FLUSHED + " " + FLUSHED,
    "flushed-and-more": ENV + FLUSHED + " torch.OutOfMemoryError: CUDA out of memory",
    "retraction-in-stats": ENV + "Decode batch, token usage: 0.50, " + RETRACT,
    "retraction-anchor-envelope": "[CUDA out of memory] " + RETRACT,
    "retraction-odd-envelope": "[scheduler pid=7] " + RETRACT,
    "retraction-twice": ENV + RETRACT + " " + RETRACT,
    "retraction-flushed": ENV + RETRACT + " " + FLUSHED,
    "retraction-tail": ENV + RETRACT + " Traceback (most recent call last):",
    "oom": ENV + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "plain": ENV + "Some other line with no anchor at all in it",
    "blank": "",
}
COMMON = ["decode"] * 30 + ["prefill"] * 6 + ["access"] * 8 + ["retraction"] * 5 + ["flushed"] * 3


def _line(rng: random.Random, kind: str) -> str:
    s, r, n = rng.randrange(60), rng.randrange(4), rng.randrange(1, 100)
    return LINES[kind].format(s=s, r=r, t=2 * r, n=n)


def _log(rng: random.Random, confusers: list[str], lines: int) -> bytes:
    # The scanner learns `Cache flushed successfully!` from this warm-up before the mix.
    warm = [_line(rng, "flushed") for _ in range(QUIET_AFTER + 4)] + [_line(rng, "oom")]
    mix = [_line(rng, rng.choice(COMMON)) for _ in range(lines)]
    for kind in confusers:
        mix.insert(rng.randrange(len(mix) + 1), _line(rng, kind))
    return ("\n".join(warm + mix) + "\n").encode()


@pytest.mark.parametrize("seed", range(12))
def test_counted_sub_blocks_find_what_the_exact_path_finds(seed: int) -> None:
    rng = random.Random(seed)
    confusers = [k for k in LINES if k not in COMMON]
    for _ in range(6):
        picked = rng.sample(confusers, rng.randint(0, 3))
        data = _log(rng, picked, rng.randint(200, 3000))
        for size in (1 << 12, 1 << 16):
            _same(data, size, force_regex=True)


CONFUSERS = sorted(k for k in LINES if k not in COMMON and k != "oom")


@pytest.mark.parametrize("kind", CONFUSERS)
def test_a_line_counted_twice_hides_no_other(kind: str) -> None:
    """Each confuser beside an OOM line in the same sub-block: were the confuser counted as two
    kinds, the counts would balance with the OOM line left out."""
    rng = random.Random(kind)
    data = _log(rng, [], 3000).splitlines(keepends=True)
    at = rng.randrange(len(data) // 2, len(data))  # well after the warm-up's sub-block
    pair = [(_line(rng, kind) + "\n").encode(), (_line(rng, "oom") + "\n").encode()]
    for size in (1 << 12, 1 << 16):
        _same(b"".join(data[:at] + pair + data[at:]), size, force_regex=True)


def test_a_repeated_line_is_learned_only_without_markers() -> None:
    frequent = Frequent([b"Decode batch", b" HTTP/1."])
    line = b"[2026-03-14 09:30:00 DP0 TP0] " + FLUSHED.encode()
    odd = b"[2026-03-14 09:30:00 DP0 TP0] Decode batch twice in a warning line"
    for _ in range(QUIET_AFTER):
        frequent.learn(odd)
        frequent.learn(b"[2026-03-14 09:30:00] short")
        frequent.learn(b"no envelope: " + FLUSHED.encode())
    assert frequent.quiet == []
    for _ in range(QUIET_AFTER):
        frequent.learn(line)
    assert frequent.quiet == [FLUSHED.encode()]


def test_a_dense_log_is_mostly_settled_by_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What keeps a dense log fast, checked by structure, not by time: after the first few
    sub-blocks have taught it `Cache flushed successfully!`, almost every sub-block of the
    benchmark's dense log (retractions at ~1.5%) is settled by counts, not stepped line by line."""
    log = tmp_path / "dense.log"
    _gen_log().write(log, target_bytes=12 << 20, dense=True)
    data = log.read_bytes()
    scanner = Scanner(ANCHORS)
    scanner._search_for(b"x" * (SMALL_INPUT + 1))
    stepped = []
    original = scanner._scan_runs

    def counting(block: bytes, pos: int, stop: int, *rest: Any) -> None:
        stepped.append(pos)
        original(block, pos, stop, *rest)

    monkeypatch.setattr(scanner, "_scan_runs", counting)
    blocks = _blocks(data, 1 << 20)
    counted = sum(c.lines for b in blocks for c in scanner.scan(b).retractions)
    sub_blocks = len(data) // SUB_BLOCK
    assert scanner._frequent.quiet == [FLUSHED.encode()]
    assert len(stepped) < sub_blocks // 10, (len(stepped), sub_blocks)
    assert counted > data.count(b"Retract requests") // 2
