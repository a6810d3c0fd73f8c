"""Scan a large plain file on every core: each worker reads its own byte range and returns the
scanned blocks (candidate lines and stats summaries, both small); the caller feeds them in order.

Only for regular, uncompressed files of PARALLEL_MIN_BYTES or more on a system that can fork;
everything else goes through the sequential reader, which produces the same scans.
"""

from __future__ import annotations

import collections
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oomdoctor.read.scan import BlockScan, Scanner
from oomdoctor.read.sources import (
    BLOCK_SIZE,
    ReadStats,
    Window,
    iter_blocks,
    merge_stats,
    plain_file,
)

PARALLEL_MIN_BYTES = 64 << 20
CHUNK = 16 << 20
#: Ranges submitted per worker ahead of the one the caller is reading.
IN_FLIGHT = 2

_scanner: Scanner | None = None  # set in the parent before forking; workers inherit it


def usable(path: Path) -> bool:
    """A big regular plain file (sources.plain_file), more than one core, and fork."""
    try:
        if not path.is_file() or path.stat().st_size < PARALLEL_MIN_BYTES:
            return False
    except OSError:
        return False
    if not plain_file(path):  # compressed or UTF-16/32: the sequential reader decodes it
        return False
    import multiprocessing

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) > 1 and "fork" in multiprocessing.get_all_start_methods()


def _ranges(path: Path) -> list[tuple[int, int]] | None:
    """Byte ranges cut where the sequential reader cuts a block: after the last newline before a
    multiple of BLOCK_SIZE. Every worker then sees the same blocks, so the block summaries (and
    everything estimated from them) do not depend on how the file was split. None if a
    boundary falls in a line longer than a block (the sequential reader handles those)."""
    size = path.stat().st_size
    bounds = [0]
    step = max(BLOCK_SIZE, CHUNK // BLOCK_SIZE * BLOCK_SIZE)
    with path.open("rb") as fh:
        for pos in range(step, size, step):
            fh.seek(pos - BLOCK_SIZE)
            nl = fh.read(BLOCK_SIZE).rfind(b"\n")
            if nl < 0:
                return None
            bounds.append(pos - BLOCK_SIZE + nl + 1)
    bounds.append(size)
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _scan_range(task: tuple[str, int, int]) -> tuple[list[BlockScan], ReadStats]:
    """One worker's job: stream its byte range in blocks, as the sequential reader would."""
    path, start, end = task
    assert _scanner is not None
    stats = ReadStats(path)
    # The first read stops at the next multiple of BLOCK_SIZE (the sequential reader's carry:
    # no newline in it), so every later read ends where the sequential reader's reads end.
    first = -(-start // BLOCK_SIZE) * BLOCK_SIZE - start
    with Path(path).open("rb") as fh:
        fh.seek(start)
        window = Window(fh, end - start, first or None)
        scans = [_scanner.scan(b) for b in iter_blocks(window, stats, sniff=False)]
    return scans, stats


def scan_file(
    path: Path,
    scanner: Scanner,
    stats: ReadStats,
    progress: Callable[[int], None] | None = None,
) -> Iterator[BlockScan] | None:
    """The scans of a file's blocks, in order, computed by a pool of workers (None: not here).

    The workers' read counts are added to ``stats`` as their results arrive."""
    ranges = _ranges(path)
    if ranges is None or len(ranges) < 2:
        return None
    return _run(path, scanner, ranges, stats, progress)


def _run(
    path: Path,
    scanner: Scanner,
    ranges: list[tuple[int, int]],
    stats: ReadStats,
    progress: Callable[[int], None] | None,
) -> Iterator[BlockScan]:
    global _scanner
    _scanner = scanner
    workers = min(len(ranges), os.cpu_count() or 2)
    import multiprocessing

    context = multiprocessing.get_context("fork")
    with context.Pool(workers) as pool:
        tasks = [(str(path), a, b) for a, b in ranges]
        # At most IN_FLIGHT ranges per worker are submitted ahead of the one being fed: a parent
        # slower than its workers then holds a bounded number of results, whatever the size.
        pending: collections.deque[tuple[tuple[int, int], Any]] = collections.deque()
        ahead = workers * IN_FLIGHT
        for (a, b), task in zip(ranges, tasks, strict=True):
            pending.append(((a, b), pool.apply_async(_scan_range, (task,))))
            if len(pending) > ahead:
                yield from _take(pending, stats, progress)
        while pending:
            yield from _take(pending, stats, progress)


def _take(
    pending: collections.deque[tuple[tuple[int, int], Any]],
    stats: ReadStats,
    progress: Callable[[int], None] | None,
) -> Iterator[BlockScan]:
    (a, b), result = pending.popleft()
    scans, part = result.get()
    merge_stats(stats, part)
    if progress is not None:
        progress(b - a)
    yield from scans
