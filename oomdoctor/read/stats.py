"""The stats lines of a block, summarised without parsing them one by one: how many of each
kind, the highest token usage, how many at ≥ 0.95, the first and last timestamps, and the last
line of each kind (what features read). A few C-level searches per block."""

from __future__ import annotations

import re
from typing import NamedTuple

STATS_HEADS = (b"Prefill batch", b"Decode batch")
_USAGE = re.compile(rb"token usage: (\d\.\d\d)")
_TS = re.compile(rb"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
HIGH_USAGE = b"0.95"


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


def summarise(block: bytes, prefill: int, decode: int) -> StatsBlock:
    """Summarise a block's stats lines (their counts come from the caller's scan)."""
    values = _USAGE.findall(block)
    peak = max(values) if values else None
    # The usage values are all `d.dd`, so bytes compare as the numbers do.
    high = sum(map(HIGH_USAGE.__le__, values)) if peak is not None and peak >= HIGH_USAGE else 0
    first = min((i for i in (block.find(h) for h in STATS_HEADS) if i >= 0), default=-1)
    last = max(block.rfind(h) for h in STATS_HEADS)
    return StatsBlock(
        prefill=prefill,
        decode=decode,
        usage_lines=len(values),
        high_lines=high,
        peak_usage=float(peak) if peak is not None else None,
        first_ts=_ts_at(block, first),
        last_ts=_ts_at(block, last),
        last_prefill=line_at(block, block.rfind(STATS_HEADS[0])),
        last_decode=line_at(block, block.rfind(STATS_HEADS[1])),
    )


def line_at(
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
        index = known_index - block.count(b"\n", start, known_offset)
    return index, block[start : end if end >= 0 else len(block)]


def _ts_at(block: bytes, pos: int) -> str | None:
    if pos < 0:
        return None
    start = block.rfind(b"\n", 0, pos) + 1
    m = _TS.search(block, start, pos)
    return m.group(1).decode("ascii").replace("T", " ") if m else None
