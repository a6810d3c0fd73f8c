#!/usr/bin/env python3
"""The scaling cases of the benchmark (issue 22 §3), one per dimension, at N and 10 N.

Each log grows in one dimension only (bench/gen_scale.py); oomdoctor (`diagnose --format json
--no-gpu`, or `--snapshot` for the snapshot case) and the simple grep run on the same file in
the same run, once each (these are long inputs of a hostile shape, not the serving logs whose
medians run.py reports). Printed: both times, oomdoctor's peak RSS (largest process), the
report's size, and whether time grew at most ~linearly from N to 10 N (within 25%; at the
default sizes the work at N is at least the start-up, printed first, so a quadratic term shows).

Usage: python bench/scale.py [--sizes pids=10000,frames=100000,...] [--only pids,gzip]
(run.py --scale runs it with the defaults.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import OUT, SIMPLE_ANCHORS, oomdoctor_cmd, timed  # noqa: E402

GEN = HERE / "gen_scale.py"
#: N per dimension (the case runs N and 10 N). 100k worker PIDs is issue 22's target.
SIZES = {
    "pids": 10_000,
    "pids_timed": 10_000,
    "ranks": 2_000,
    "tracebacks": 10_000,
    "chains": 2_000,
    "frames": 100_000,
    "gzip": 100_000,
    "oom_pids": 2_500,
    "snapshot": 30_000,
}
#: The target of issue 22: 100k distinct worker PIDs under 5 s and 100 MB.
PIDS_TARGET = (100_000, 5.0, 100e6)


class Case(NamedTuple):
    dimension: str
    n: int
    mb: float
    grep_s: float
    oomdoctor_s: float
    rss_mib: float
    report_kib: float


def _input(dimension: str, n: int) -> tuple[Path, list[str]]:
    """The file to read and the oomdoctor arguments for one case (generated once)."""
    ext = {"gzip": ".log.gz", "snapshot": ".json"}.get(dimension, ".log")
    path = OUT / f"scale-{dimension}-{n}{ext}"
    if not path.exists():
        subprocess.run([sys.executable, str(GEN), dimension, str(n), str(path)], check=True)
    if dimension != "snapshot":
        return path, ["--no-gpu", str(path)]
    log = OUT / "scale-pids-8.log"
    if not log.exists():
        subprocess.run([sys.executable, str(GEN), "pids", "8", str(log)], check=True)
    return path, ["--snapshot", str(path), str(log)]


def run_case(dimension: str, n: int, simple: Path) -> Case:
    path, args = _input(dimension, n)
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # page cache
    grep = ["zgrep" if dimension == "gzip" else "grep", "-n", "-E", "-f", str(simple), str(path)]
    grep_s = timed(grep, OUT / "grep.out")[0]
    report = OUT / "scale.json"
    wall, rss, _ = timed([*oomdoctor_cmd(), "diagnose", "--format", "json", *args], report)
    return Case(
        dimension,
        n,
        path.stat().st_size / 1e6,
        grep_s,
        wall,
        rss / 1024,
        report.stat().st_size / 1024,
    )


def startup_s() -> float:
    _, args = _input("pids", 1)
    return timed([*oomdoctor_cmd(), "diagnose", "--format", "json", *args], OUT / "scale.json")[0]


def run(sizes: dict[str, int]) -> list[tuple[str, bool]]:
    OUT.mkdir(exist_ok=True)
    simple = OUT / "simple.txt"
    simple.write_text("".join(a + "\n" for a in SIMPLE_ANCHORS))
    base = startup_s()
    print(f"\nscaling (issue 22), one run each; start-up on a 1-worker log {base:.2f} s")
    print("| dimension | N | size | simple grep | oomdoctor | peak RSS | report |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    checks: list[tuple[str, bool]] = []
    for dimension, n in sizes.items():
        pair = [run_case(dimension, size, simple) for size in (n, 10 * n)]
        for c in pair:
            print(
                f"| {c.dimension} | {c.n:,} | {c.mb:.1f} MB | {c.grep_s:.2f} s "
                f"| {c.oomdoctor_s:.2f} s | {c.rss_mib:.0f} MiB | {c.report_kib:.0f} KiB |"
            )
        small, big = (c.oomdoctor_s for c in pair)
        linear = big <= 12.5 * small  # N must be large enough that its work passes start-up
        checks.append((f"{dimension}: time linear from {n:,} to {10 * n:,}", linear))
        checks.append(
            (f"{dimension}: report bounded", pair[1].report_kib <= 1.5 * pair[0].report_kib + 4)
        )
        if dimension.startswith("pids") and pair[1].n == PIDS_TARGET[0]:
            _, limit_s, limit_b = PIDS_TARGET
            ok = pair[1].oomdoctor_s < limit_s and pair[1].rss_mib * (1 << 20) < limit_b
            checks.append((f"{dimension}: 100k worker PIDs under {limit_s:.0f} s and 100 MB", ok))
    return checks


def parse_sizes(text: str) -> dict[str, int]:
    sizes = dict(SIZES)
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name not in SIZES:
            raise SystemExit(f"unknown dimension {name!r} (of {', '.join(SIZES)})")
        sizes[name] = int(value)
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="", help="N per dimension: pids=10000,frames=100000")
    parser.add_argument("--only", default="", help="dimensions to run (default: all)")
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    if args.only:
        sizes = {k: v for k, v in sizes.items() if k in args.only.split(",")}
    checks = run(sizes)
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
