#!/usr/bin/env python3
"""Benchmark: the ceiling of ONE compiled pass per block, against oomdoctor's pure-Python scanner.

A measurement, not shipped code. The shipped block scanner (oomdoctor/read/scan.py, frequent.py,
stats.py) spends almost all its time in C-level ``bytes.count`` passes over every 64 KiB
sub-block and one ``re.findall`` per 1 MiB block for the stats summary. bench/cscan.c makes one
pass line by line (memchr for newlines) and fills the same per-block summary: newlines, lines
holding ``Prefill batch``, ``Decode batch``, `` HTTP/1.``, the retraction marker, the
``token usage: d.dd`` values (count, ≥ 0.95, maximum) and the lines holding none of those (the
"other" lines, which would still need the anchor test). It finds no candidates, so its time is
a floor for any compiled scanner, not a drop-in replacement.

For each log the 1 MiB blocks (``iter_blocks``) are read into a list once, then timed in CPU
seconds (``time.process_time``), best of ``--reps``, interleaved: read alone; the shipped
``Scanner.scan`` (a fresh scanner per run); the C pass; the C pass counting newlines only (what
memchr alone costs); the C pass built with glibc ``memmem`` instead of its own memchr-on-a-rare-
byte search. Every block is cross-checked: newlines against ``block.count(b"\\n")``, usage
count, high count and peak against ``stats.summarise``.

``--estimate`` (default: the 512 MiB logs in bench/out/) then measures, per log, the parts of an
end-to-end run (the parent's extraction from the shipped scans, workers' read + scan CPU),
``grep -n -E -f bench/out/simple.txt`` and ``oomdoctor diagnose`` (wall and CPU, median of 3),
and models a run whose workers did the C pass: start-up + max((workers + parent) / 2 cores,
parent), also with the CPU the real run spends beyond those parts added to the workers'.

The C file is compiled on the fly into bench/out/ (git-ignored): gcc must be installed.

Usage: python bench/cscan.py [--reps 3] [LOG ...] [--estimate [LOG512 ...]]
       (default logs: a 128M sparse and a 128M dense log, generated as bench/compiled.py does)
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from oomdoctor.incident.assemble import Assembler
from oomdoctor.incident.feed import Feeder
from oomdoctor.pipeline import extractor_for, load_rules
from oomdoctor.read.scan import BlockScan
from oomdoctor.read.sources import ReadStats, iter_blocks
from oomdoctor.read.stats import summarise

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
MIB = 1 << 20
STARTUP_S = 0.15  # oomdoctor's start-up (bench/run.py measures it)
CORES = 2


class Result(ctypes.Structure):
    """bench/cscan.c ``cscan_result``."""

    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "newlines",
            "prefill",
            "decode",
            "access",
            "retraction",
            "usage",
            "high",
            "peak",
            "other",
        )
    ]


def build(name: str, *defines: str) -> Callable[[bytes, int], Result]:
    """Compile bench/cscan.c into bench/out/NAME and return a caller of its ``cscan``."""
    OUT.mkdir(exist_ok=True)
    lib = OUT / name
    cmd = ["gcc", "-O2", "-shared", "-fPIC", *defines, "-o", str(lib), str(HERE / "cscan.c")]
    subprocess.run(cmd, check=True, cwd=ROOT)
    fn = ctypes.CDLL(str(lib)).cscan
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(Result)]
    fn.restype = None
    result = Result()
    ref = ctypes.byref(result)

    def cscan(block: bytes, flags: int = 0) -> Result:
        fn(block, len(block), flags, ref)  # a bytes argument is passed by pointer, not copied
        return result

    return cscan


def read_blocks(path: Path) -> list[bytes]:
    with path.open("rb") as fh:
        return list(iter_blocks(fh, ReadStats(str(path))))


def stream_blocks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        yield from iter_blocks(fh, ReadStats(str(path)))


def new_scan() -> Callable[[bytes], BlockScan]:
    return extractor_for(load_rules()).scanner.scan


def cpu(run: Callable[[], object]) -> float:
    gc.collect()
    started = time.process_time()
    run()
    return time.process_time() - started


def best(runs: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """CPU seconds of each run, best of ``reps``, interleaved (a busy spell hits every one)."""
    out = dict.fromkeys(runs, float("inf"))
    for _ in range(reps):
        for name, run in runs.items():
            out[name] = min(out[name], cpu(run))
    return out


def check(blocks: list[bytes], cscan: Callable[[bytes, int], Result]) -> tuple[int, list[int]]:
    """Blocks whose C counts differ from Python's, and the C totals (untimed)."""
    bad, totals = 0, [0] * len(Result._fields_)
    for n, block in enumerate(blocks):
        r = cscan(block, 0)
        s = summarise(block, 0, 0)
        peak = round(s.peak_usage * 100) if s.peak_usage is not None else -1
        ours = (r.newlines, r.usage, r.high, r.peak)
        theirs = (block.count(b"\n"), s.usage_lines, s.high_lines, peak)
        if ours != theirs:
            bad += 1
            if bad <= 3:
                print(f"  block {n}: C {ours} != Python {theirs}", file=sys.stderr)
        for i, (name, _) in enumerate(Result._fields_):
            totals[i] = max(totals[i], r.peak) if name == "peak" else totals[i] + getattr(r, name)
    return bad, totals


def measure(path: Path, reps: int, cscan: Callable, memmem: Callable) -> tuple[list[str], str]:
    size = path.stat().st_size
    read_blocks(path)  # warm the page cache
    blocks = read_blocks(path)
    bad, totals = check(blocks, cscan)

    def shipped() -> None:
        scan = new_scan()
        for block in blocks:
            scan(block)

    def over(fn: Callable, flags: int = 0) -> Callable[[], None]:
        def run() -> None:
            for block in blocks:
                fn(block, flags)

        return run

    t = best(
        {
            "read": lambda: read_blocks(path),
            "shipped": shipped,
            "c": over(cscan),
            "nl": over(cscan, 1),
            "memmem": over(memmem),
        },
        reps,
    )
    row = [
        path.name,
        f"{size / MIB:,.0f} MiB",
        f"{t['read']:.3f} s",
        f"{t['shipped']:.3f} s",
        f"{t['c']:.3f} s ({size / MIB / t['c']:,.0f} MiB/s)",
        f"{t['shipped'] / t['c']:.1f}×",
        f"{t['nl']:.3f} s",
        f"{t['memmem']:.3f} s",
        "yes" if bad == 0 else f"no ({bad} blocks)",
    ]
    counts = ", ".join(
        f"{name} {v:,}" for (name, _), v in zip(Result._fields_, totals, strict=True)
    )
    return row, f"{path.name}: {len(blocks)} blocks; {counts}"


def median_wall(cmd: list[str], out: Path, runs: int = 3) -> tuple[float, float]:
    """(median wall seconds, median child CPU seconds) of ``cmd``, its stdout to ``out``."""
    walls, cpus = [], []
    env = {**os.environ, "NO_COLOR": "1"}
    for _ in range(runs):
        with out.open("wb") as fh:
            started = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.DEVNULL, env=env)
            _, _, usage = os.wait4(proc.pid, 0)
            walls.append(time.perf_counter() - started)
            cpus.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def estimate(path: Path, reps: int, cscan: Callable) -> list[str]:
    """The parts of an end-to-end run of a big log, and the modelled run with the C pass."""
    rules = load_rules()
    scans = list(map(new_scan(), stream_blocks(path)))  # untimed: what workers return

    def parent() -> None:
        extractor = extractor_for(rules)
        Feeder(extractor, Assembler([path.name]), 0).blocks(scans)

    def shipped() -> None:
        scan = new_scan()
        for block in stream_blocks(path):
            scan(block)

    def compiled() -> None:
        for block in stream_blocks(path):
            cscan(block, 0)

    t = best({"parent": parent, "shipped": shipped, "c": compiled}, reps)
    grep, grep_cpu = median_wall(
        ["grep", "-n", "-E", "-f", str(OUT / "simple.txt"), str(path)], OUT / "cscan-grep.out"
    )
    exe = Path(sys.executable).with_name("oomdoctor")
    ours, ours_cpu = median_wall(
        [str(exe), "diagnose", "--format", "json", "--no-gpu", str(path)], OUT / "cscan-oom.json"
    )
    # CPU the real run spends beyond start-up and the parts measured here (fork, pickling, the
    # pipeline after reading, workers slowed by sharing the machine): assumed to stay.
    extra = max(0.0, ours_cpu - STARTUP_S - t["parent"] - t["shipped"])

    def model(workers: float, more: float = 0.0) -> float:
        return STARTUP_S + max((workers + t["parent"] + more) / CORES, t["parent"])

    return [
        path.name,
        f"{t['parent']:.2f} s",
        f"{t['shipped']:.2f} s",
        f"{t['c']:.2f} s",
        f"{ours:.2f} s (cpu {ours_cpu:.2f})",
        f"{extra:.2f} s",
        f"{model(t['c']):.2f} s",
        f"{model(t['c'], extra):.2f} s",
        f"{grep:.2f} s (cpu {grep_cpu:.2f})",
    ]


def table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="*", type=Path, help="logs (default: generated 128M)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each, best kept")
    parser.add_argument("--estimate", nargs="*", type=Path, help="512 MiB logs to model a run of")
    args = parser.parse_args(argv)
    reps = max(1, args.reps)
    cscan = build("cscan.so")
    memmem = build("cscan-memmem.so", "-DCSCAN_MEMMEM")
    from compiled import generated  # bench/compiled.py: the same cached 128M logs

    logs = args.logs or [generated("sparse"), generated("dense")]
    measured = [measure(p, reps, cscan, memmem) for p in logs]
    header = ["log", "size", "read", "shipped scan", "C pass", "speed-up", "C newlines only"]
    table([*header, "C with memmem", "counts equal"], [row for row, _ in measured])
    print()
    for _, counts in measured:
        print(counts)
    print(f"CPU seconds, best of {reps}; speed-up = shipped scan / C pass.")
    if args.estimate is not None:
        print()
        header = ["log", "parent extraction", "workers: read + shipped scan"]
        header += ["workers: read + C pass", "oomdoctor now (wall)", "unexplained cpu"]
        header += ["model with C", "model with C + unexplained", "simple grep (wall)"]
        big = args.estimate or [generated(v, "512M") for v in ("sparse", "dense")]
        table(header, [estimate(p, reps, cscan) for p in big])
        print()
        print(
            f"CPU seconds best of {reps}; walls (and their child CPU) median of 3. model = "
            f"{STARTUP_S} s start-up + max((workers + parent [+ unexplained]) / {CORES} cores, "
            "parent); unexplained = oomdoctor's CPU now - start-up - parent - read + shipped scan."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
