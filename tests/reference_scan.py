"""The previous engine's scanner (oomdoctor/read/scan.py before the block-level search), kept
verbatim as the reference the new one is compared with (tests/test_scan_equivalence.py).

Find the few lines worth parsing in blocks of a log, at close to grep's speed.

A production log is mostly two kinds of boring line: the periodic `Prefill/Decode batch` stats
and uvicorn access lines. Each block is cut into sub-blocks; a sub-block whose lines are all
boring (three C-level counts say so) is skipped whole, the others are split and only their
non-boring lines are tested against the anchors of every signature and rule. The stats lines are
not parsed one by one: each block is summarised with a few C-level searches (how many, the
highest token usage, how many at ≥ 0.95, the first and last timestamps, the last line of each
kind). The caller gets the candidate lines and that summary; line numbers stay exact.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import NamedTuple

SUB_BLOCK = 1 << 16
#: Below these the anchors are tested with substring checks instead of a compiled alternation.
SMALL_INPUT = 256 << 10
SMALL_LINES = 5000
STATS_HEADS = (b"Prefill batch", b"Decode batch")
#: uvicorn access lines (`"POST /generate HTTP/1.1" 200`): frequent, never evidence.
ACCESS = b" HTTP/1."
_USAGE = re.compile(rb"token usage: (\d\.\d\d)")
_TS = re.compile(rb"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
HIGH_USAGE = b"0.95"
#: Samples of the boring lines: a rule anchor found in one of them disables the exclusion.
_BORING_SAMPLES = (
    "Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.50, "
    "#running-req: 8, #queue-req: 2, cuda graph: False, input throughput (token/s): 1000.00",
    "Decode batch. #running-req: 8, #token: 1000, token usage: 0.50, cuda graph: True, "
    "gen throughput (token/s): 100.00, #queue-req: 0",
    'INFO:     127.0.0.1:45678 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    'INFO:     10.0.0.2:5000 - "GET /health HTTP/1.1" 503 Service Unavailable',
)


class StatsBlock(NamedTuple):
    """The stats lines of one block, summarised without parsing them one by one."""

    prefill: int = 0
    decode: int = 0
    usage_lines: int = 0
    high_lines: int = 0  # token usage ≥ 0.95
    peak_usage: float | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    last_prefill: tuple[int, bytes] | None = None  # (line index in the block, raw line)
    last_decode: tuple[int, bytes] | None = None


class BlockScan(NamedTuple):
    newlines: int
    candidates: tuple[tuple[int, bytes], ...]  # (line index in the block, raw line)
    stats: StatsBlock | None


class Scanner:
    """Anchors of every signature and rule, and the fast path around boring lines."""

    def __init__(self, anchors: Iterable[str]) -> None:
        unique = sorted({a for a in anchors if a}, key=lambda a: (-len(a), a))
        if not unique:
            raise ValueError("a scanner needs at least one anchor")
        self.anchors = tuple(unique)
        self._encoded = tuple(a.encode("utf-8") for a in unique)
        self._regex: re.Pattern[bytes] | None = None
        self._tested = 0  # lines tested with substring checks so far
        rare = [a for a in unique if a.encode() not in STATS_HEADS]
        self._stats_boring = not any(a in s for a in rare for s in _BORING_SAMPLES[:2])
        self._access_boring = not any(a in s for a in rare for s in _BORING_SAMPLES[2:])

    # -- the anchor test ---------------------------------------------------------------------

    def _search_for(self, data: bytes) -> Callable[[bytes], object]:
        """One alternation of every anchor is the fast test, but compiling it costs a few ms, a
        noticeable part of a short run. Small inputs test lines with substring checks instead;
        the alternation is compiled once a big block or enough lines come along."""
        if self._regex is None and (len(data) > SMALL_INPUT or self._tested > SMALL_LINES):
            self._regex = re.compile(b"|".join(re.escape(a) for a in self._encoded))
        if self._regex is not None:
            return self._regex.search
        return self._contains

    def _contains(self, line: bytes) -> bool | None:
        self._tested += 1
        return any(a in line for a in self._encoded) or None

    # -- blocks ---------------------------------------------------------------------------

    def scan(self, block: bytes) -> BlockScan:
        """Candidates and stats of a block of whole lines (it ends with a newline)."""
        candidates: list[tuple[int, bytes]] = []
        search = self._search_for(block)
        stats_boring, access_boring = self._stats_boring, self._access_boring
        base = 0  # line index of the current sub-block's first line
        prefill = decode = 0
        pos, n = 0, len(block)
        while pos < n:
            end = block.rfind(b"\n", pos, pos + SUB_BLOCK) + 1
            if end <= pos:
                end = block.find(b"\n", pos + SUB_BLOCK) + 1 or n
            sub = block[pos:end]
            lines = sub.count(b"\n") + (0 if sub.endswith(b"\n") else 1)
            p, d = sub.count(STATS_HEADS[0]), sub.count(STATS_HEADS[1])
            prefill, decode = prefill + p, decode + d
            boring = p + d if stats_boring else 0
            if access_boring:
                boring += sub.count(ACCESS)
            if boring != lines:
                offset = pos
                for i, line in enumerate(sub.split(b"\n")):
                    here, offset = offset, offset + len(line) + 1
                    if stats_boring and (STATS_HEADS[0] in line or STATS_HEADS[1] in line):
                        continue
                    if access_boring and ACCESS in line:
                        continue
                    if search(line):
                        # The stats lines just before it say what the server was doing then.
                        for head in STATS_HEADS if stats_boring else ():
                            context = _line_at(block, block.rfind(head, 0, here), pos, base)
                            if context is not None and context not in candidates:
                                candidates.append(context)
                        candidates.append((base + i, line))
            base += lines
            pos = end
        newlines = base - (0 if block.endswith(b"\n") or not block else 1)
        stats = self.stats(block, prefill, decode) if prefill or decode else None
        return BlockScan(newlines, tuple(sorted(candidates)), stats)

    def stats(self, block: bytes, prefill: int, decode: int) -> StatsBlock:
        """Summarise a block's stats lines (their counts come from the caller's scan)."""
        values = _USAGE.findall(block)
        values.sort()
        first = min((i for i in (block.find(h) for h in STATS_HEADS) if i >= 0), default=-1)
        last = max(block.rfind(h) for h in STATS_HEADS)
        return StatsBlock(
            prefill=prefill,
            decode=decode,
            usage_lines=len(values),
            high_lines=len(values) - bisect_left(values, HIGH_USAGE),
            peak_usage=float(values[-1]) if values else None,
            first_ts=_ts_at(block, first),
            last_ts=_ts_at(block, last),
            last_prefill=_line_at(block, block.rfind(STATS_HEADS[0])),
            last_decode=_line_at(block, block.rfind(STATS_HEADS[1])),
        )

    # -- single lines (normalised text) ------------------------------------------------------

    def anchors_in(self, text: str) -> set[str]:
        """Which anchors a (decoded, normalised) text contains, overlapping ones included.

        Only candidate lines get here, so a loop of substring tests is cheaper than compiling a
        second alternation at start-up."""
        return {a for a in self.anchors if a in text}

    def has_anchor(self, text: str) -> bool:
        return any(a in text for a in self.anchors)


def _line_at(
    block: bytes, pos: int, known_offset: int = 0, known_index: int = 0
) -> tuple[int, bytes] | None:
    """The line holding byte ``pos``, with its index (counted from a known line start)."""
    if pos < 0:
        return None
    start = block.rfind(b"\n", 0, pos) + 1
    end = block.find(b"\n", pos)
    if start >= known_offset:
        index = known_index + block.count(b"\n", known_offset, start)
    else:
        index = block.count(b"\n", 0, start)
    return index, block[start : end if end >= 0 else len(block)]


def _ts_at(block: bytes, pos: int) -> str | None:
    if pos < 0:
        return None
    start = block.rfind(b"\n", 0, pos) + 1
    m = _TS.search(block, start, pos)
    return m.group(1).decode("ascii").replace("T", " ") if m else None
