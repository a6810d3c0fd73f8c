#!/usr/bin/env python3
"""Benchmark: a compiled multi-pattern engine (Hyperscan) against oomdoctor's pure-Python scanner.

The question: would a compiled multi-pattern engine beat the shipped block scanner
(oomdoctor/read/scan.py) by a wide margin? A fair answer counts what every engine has to
produce, not the anchor search alone: the block's line count and the stats summary
(oomdoctor/read/stats.py ``summarise``) are part of any engine's output, and the shipped scanner
already gets most of its speed from C-level counts and one regex match per run of boring lines.

For each log the 1 MiB blocks of whole lines (``iter_blocks``) are read into a list once, then
timed, in CPU seconds (``time.process_time``), best of ``--reps`` runs, interleaved:

* read: ``iter_blocks`` over the file alone (page cache warm);
* shipped scan: ``Scanner.scan`` of every block (a fresh scanner each run, as one oomdoctor run
  has; its regex compile is included);
* hyperscan variant, per block: ``block.count`` of newlines, ``Prefill batch`` and
  ``Decode batch``, ``summarise`` (where there are stats lines, as the scanner does), one
  Hyperscan block-mode scan with every anchor but the two stats heads as a literal (plain flags:
  every match is reported, de-duplicated by line in the callback), then the scanner's exclusions
  on those lines only (``Prefill batch``, ``Decode batch``, `` HTTP/1.``);
* of which hs scan: the Hyperscan scan with that callback alone (database compiled beforehand,
  its compile time printed below the table).

The variant finds no stats context lines and counts no retraction runs, so it does a little
less than the scanner. Its candidates are checked against the scanner's, block by block, in an
untimed pass: the scanner's candidates minus its stats context lines (those holding a stats
head) must equal the variant's exactly, except retraction lines (``RETRACTION.fullmatch``):
those the scanner passed must be among the variant's, and the variant's count of them must be
the passed ones plus the ``Counted`` ones. Newline counts and stats summaries must agree too.

Hyperscan is a benchmark-only tool, not a dependency: ``pip install hyperscan==0.9.1``.

Usage: python bench/compiled.py [--reps 3] [LOG ...]
       (default: a 128M sparse and a 128M dense log from bench/gen_log.py, cached in bench/out/)
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oomdoctor.pipeline import extractor_for, load_rules
from oomdoctor.read.scan import ACCESS, RETRACTION, BlockScan, Scanner
from oomdoctor.read.sources import ReadStats, iter_blocks
from oomdoctor.read.stats import STATS_HEADS, StatsBlock, summarise

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
GEN = HERE / "gen_log.py"
MIB = 1 << 20
PREFILL, DECODE = STATS_HEADS

#: One block's result of the variant: newlines, stats, and the (line start, line) candidates.
Found = tuple[int, StatsBlock | None, list[tuple[int, bytes]]]


def generated(variant: str, size: str = "128M") -> Path:
    """A generated log, cached under bench/out/ (named as bench/run.py names its own)."""
    digest = hashlib.sha256(GEN.read_bytes()).hexdigest()[:10]
    path = OUT / f"sglang-{variant}-{size}-{digest}.log"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        print(f"generating {path.name} ...", file=sys.stderr, flush=True)
        part = path.with_suffix(".part")
        flags = ["--dense"] if variant == "dense" else []
        subprocess.run([sys.executable, str(GEN), *flags, size, str(part)], check=True)
        part.replace(path)
    return path


def read_blocks(path: Path) -> list[bytes]:
    with path.open("rb") as fh:
        return list(iter_blocks(fh, ReadStats(str(path))))


class HsVariant:
    """Counts, stats summary, one Hyperscan scan per block, the scanner's exclusions."""

    def __init__(self, hyperscan: Any, anchors: Sequence[str]) -> None:
        self.patterns = [a.encode() for a in anchors if a.encode() not in STATS_HEADS]
        started = time.process_time()
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self.db.compile(
            expressions=self.patterns,
            ids=list(range(len(self.patterns))),
            flags=0,
            literal=True,
        )
        self.scratch = hyperscan.Scratch(self.db)
        self.compile_s = time.process_time() - started

    def starts(self, block: bytes) -> list[int]:
        """The start offsets of the lines holding an anchor, in order, each once."""
        starts: list[int] = []
        line_end = -1  # the newline ending the last line found
        rfind, find, append = block.rfind, block.find, starts.append

        def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            nonlocal line_end
            if to <= line_end:  # matches come in order of their end: same line as the last
                return
            append(rfind(b"\n", 0, to) + 1)
            line_end = find(b"\n", to)
            if line_end < 0:
                line_end = len(block)

        self.db.scan(block, match_event_handler=on_match, scratch=self.scratch)
        return starts

    def scan(self, block: bytes) -> Found:
        newlines = block.count(b"\n")
        prefill, decode = block.count(PREFILL), block.count(DECODE)
        stats = summarise(block, prefill, decode) if prefill or decode else None
        lines: list[tuple[int, bytes]] = []
        find = block.find
        for start in self.starts(block):
            end = find(b"\n", start)
            line = block[start : end if end >= 0 else len(block)]
            if PREFILL in line or DECODE in line or ACCESS in line:
                continue
            lines.append((start, line))
        return newlines, stats, lines


def mismatch(block: bytes, ship: BlockScan, found: Found) -> str | None:
    """Why the variant's result of a block differs from the scanner's (None: it does not)."""
    newlines, stats, lines = found
    if newlines != ship.newlines:
        return f"newlines {newlines} != {ship.newlines}"
    if stats != ship.stats:
        return f"stats {stats} != {ship.stats}"
    theirs, index, offset = set(), 0, 0
    for start, line in lines:
        index += block.count(b"\n", offset, start)
        offset = start
        theirs.add((index, line))
    ours = {(i, line) for i, line in ship.candidates if PREFILL not in line and DECODE not in line}
    ours_r = {c for c in ours if RETRACTION.fullmatch(c[1])}
    theirs_r = {c for c in theirs if RETRACTION.fullmatch(c[1])}
    if ours - ours_r != theirs - theirs_r:
        extra, missing = sorted(theirs - theirs_r - ours), sorted(ours - ours_r - theirs)
        return f"lines: hyperscan only {extra[:3]}, scanner only {missing[:3]}"
    if not ours_r <= theirs_r:
        return f"retraction lines passed but not found: {sorted(ours_r - theirs_r)[:3]}"
    counted = sum(c.lines for c in ship.retractions)
    if len(theirs_r) != len(ours_r) + counted:
        return f"retraction lines {len(theirs_r)} != {len(ours_r)} passed + {counted} counted"
    return None


def check(blocks: list[bytes], anchors: Sequence[str], variant: HsVariant) -> int:
    """Blocks whose results differ (untimed; a fresh scanner over the blocks in order)."""
    scanner = Scanner(anchors)
    bad = 0
    for n, block in enumerate(blocks):
        why = mismatch(block, scanner.scan(block), variant.scan(block))
        if why is not None:
            bad += 1
            if bad <= 3:
                print(f"  block {n}: {why}", file=sys.stderr)
    return bad


def cpu(run: Callable[[], object]) -> float:
    gc.collect()
    started = time.process_time()
    run()
    return time.process_time() - started


def measure(path: Path, anchors: Sequence[str], variant: HsVariant, reps: int) -> list[str]:
    size = path.stat().st_size
    read_blocks(path)  # warm the page cache
    blocks = read_blocks(path)
    bad = check(blocks, anchors, variant)

    def shipped() -> None:
        scan = Scanner(anchors).scan
        for block in blocks:
            scan(block)

    def hs_variant() -> None:
        for block in blocks:
            variant.scan(block)

    def hs_scan() -> None:
        for block in blocks:
            variant.starts(block)

    runs: dict[str, Callable[[], object]] = {
        "read": lambda: read_blocks(path),
        "shipped": shipped,
        "variant": hs_variant,
        "hs": hs_scan,
    }
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(reps):  # interleaved, so that a busy spell hits every kind alike
        for name, run in runs.items():
            best[name] = min(best[name], cpu(run))

    def cell(name: str) -> str:
        return f"{best[name]:.3f} s ({size / MIB / max(best[name], 1e-6):,.0f} MiB/s)"

    equal = "yes" if bad == 0 else f"no ({bad} blocks)"
    return [
        path.name,
        f"{size / MIB:,.1f} MiB",
        *(cell(name) for name in runs),
        equal,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="*", type=Path, help="logs (default: generated 128M)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each, best kept")
    args = parser.parse_args(argv)
    try:
        import hyperscan
    except ImportError as exc:
        print(f"hyperscan is not installed ({exc}): pip install hyperscan==0.9.1")
        return 0
    logs = args.logs or [generated("sparse"), generated("dense")]
    anchors = extractor_for(load_rules()).scanner.anchors
    variant = HsVariant(hyperscan, anchors)
    header = [
        "log",
        "size",
        "read",
        "shipped scan",
        "hyperscan variant",
        "of which hs scan",
        "candidates equal",
    ]
    rows = [measure(path, anchors, variant, max(1, args.reps)) for path in logs]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print(
        f"CPU seconds, best of {max(1, args.reps)}; {len(anchors)} anchors "
        f"({len(variant.patterns)} in the Hyperscan database, compiled in "
        f"{variant.compile_s * 1000:.1f} ms, not counted above)."
    )
    print(
        f"{platform.platform()}, Python {platform.python_version()}, "
        f"hyperscan {importlib.metadata.version('hyperscan')}, {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
