#!/usr/bin/env python3
"""Benchmark: oomdoctor against grep on the same generated SGLang logs, in one run.

For each log variant and size (default: sparse and dense, 10M, 100M, 512M, plus 50M of blank
lines) it generates the log once (bench/out/, reused while the generator is unchanged), warms the
page cache, waits for an idle machine (rows where it never came are marked busy), then
alternates, REPS times each:

    grep -n -E -f bench/out/anchors.txt LOG > bench/out/grep.out     # every anchor oomdoctor knows
    grep -n -E -f bench/out/simple.txt LOG > bench/out/grep.out      # a dozen memory words
    oomdoctor diagnose --format json --no-gpu LOG > bench/out/oomdoctor.json

and prints the median wall time of each, both ratios, oomdoctor's throughput and peak RSS. The
simple grep is what a user on call compares with; the all-anchors grep prints most of a log
(its anchors include the stats lines), so most of its time is output. The sparse log has one
non-stats line in ~300 (two DP ranks); the dense one has four DP ranks whose pool is full, with
retractions at ~1.5% of lines and `Cache flushed` at ~0.5%. grep's output goes to a file, not
/dev/null: GNU grep stops at the first match when it sees /dev/null, which would time nothing.

Peak RSS is the largest single process (from wait4; large files are scanned by forked workers, each
reported by the kernel as its own process) and, where /proc exists, the sampled sum over the
process tree (shared pages counted once per process, so an over-estimate). The kernel's figure for
a child includes the parent's memory at spawn time, so this script keeps itself small: it never
imports oomdoctor or reads a log itself.

Start-up: `oomdoctor diagnose --format json --no-gpu` (the target) and, for comparison, the text
report and plain `diagnose` (live GPU state) on a 100-line generated log against
`python -c "import click, rich.console"`, same interpreter, bytecode caches warm.

Usage: python bench/run.py [--variants sparse,dense] [--sizes 10M,100M,512M] [--blank 50M]
                           [--reps 5] [--startup-reps 21] [--compiled]
                           [--scale] [--scale-only] [--scale-sizes pids=10000,...]

``--scale`` also runs one case per dimension that issue 22 found growing faster than the input
(bench/gen_scale.py: distinct vLLM worker PIDs, SGLang ranks, tracebacks, "During handling…"
chains, frames, gzip members, PIDs named in one OOM message, processes in a snapshot), each at
N and 10 N, against the simple grep on the same file: time and peak RSS, the report's size, and
whether the time grew at most ~linearly; ``--scale-sizes`` sets N per dimension
(``pids=10000,frames=100000``), and ``--scale-only`` skips the serving logs.

``--compiled`` also runs bench/compiled.py (a Hyperscan-based scan against the shipped one, on
128 MB logs; needs ``pip install hyperscan``).

Exit status 1 if a target (issue 15) is missed (so a CI job could run it; the test suite does not).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
GEN = HERE / "gen_log.py"
MIB = 1 << 20


def oomdoctor_cmd() -> list[str]:
    script = Path(sys.executable).with_name("oomdoctor")
    if script.exists():
        return [str(script)]
    found = shutil.which("oomdoctor")
    return [found] if found else [sys.executable, "-m", "oomdoctor"]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure with bytecode caches, as installed
    env["NO_COLOR"] = "1"
    return env


ANCHORS_SCRIPT = """
import re, sys
from oomdoctor.pipeline import load_rules, matchers
anchors = sorted({a for m in matchers(load_rules()) for a in m.anchors if a})
sys.stdout.write("".join(re.sub(r"([.^$*+?()\\[\\]{}|\\\\])", r"\\\\\\1", a) + "\\n" for a in anchors))
"""


def write_anchors(path: Path) -> int:
    """The anchors as ERE lines. Computed in a child: importing oomdoctor here would grow this
    process, and a child's peak RSS includes what it inherited before exec."""
    text = subprocess.run(
        [sys.executable, "-c", ANCHORS_SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    path.write_text(text)
    return len(text.splitlines())


#: What a user on call greps for: a dozen memory words, not every anchor oomdoctor knows.
SIMPLE_ANCHORS = (
    "out of memory",
    "Not enough memory",
    "OutOfMemoryError",
    "Traceback",
    "CUDA error",
    "RuntimeError",
    "Retract requests",
    "illegal memory access",
    "NCCL error",
    "exit code",
    "Killed",
    "SIGQUIT",
)
#: The log variants: the generator's sparse and dense serving, and a file of blank lines.
VARIANTS = ("sparse", "dense", "blank")


def generated(size: str, lines: bool = False, variant: str = "sparse") -> Path:
    digest = hashlib.sha256(GEN.read_bytes()).hexdigest()[:10]
    tag = f"{variant}-{size}{'-lines' if lines else ''}"
    path = OUT / f"sglang-{tag}-{digest}.log"
    if not path.exists():
        for old in OUT.glob(f"sglang-{tag}-*.log"):
            old.unlink()
        print(f"generating {path.name} ...", file=sys.stderr, flush=True)
        if variant == "blank":  # blank lines, then a short served log that ends in its crash
            tail = OUT / "tail.log"
            subprocess.run([sys.executable, str(GEN), "--lines", "300", str(tail)], check=True)
            with path.open("wb") as fh:
                for _ in range(parse_size(size) // MIB):
                    fh.write(b"\n" * MIB)
                fh.write(tail.read_bytes())
            return path
        args = [sys.executable, str(GEN), *(["--lines"] if lines else [])]
        args += [*(["--dense"] if variant == "dense" else []), size, str(path)]
        subprocess.run(args, check=True)
    return path


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    suffix = text[-1].upper()
    return int(float(text[:-1]) * units[suffix]) if suffix in units else int(text)


def wait_idle(limit_s: float = 60.0) -> bool:
    """Wait for the 1-minute load to fall below half the cores; False if it never did (the
    figures are then flagged: another job shares the machine)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    deadline = time.monotonic() + limit_s
    while os.getloadavg()[0] > 0.5 * (cores or 1):
        if time.monotonic() > deadline:
            return False
        time.sleep(2)
    return True


def warm(path: Path) -> None:
    """Read the file into the page cache, in a child: a child's peak RSS as the kernel reports it
    includes what its parent held when it was spawned, so this process must stay small."""
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)


class TreeSampler(threading.Thread):
    """Sum of VmRSS over a process and its descendants, sampled every 20 ms (Linux /proc)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self.done = pid, 0, False

    def run(self) -> None:
        while not self.done:
            self.peak_kib = max(self.peak_kib, sum(_rss_kib(p) for p in _tree(self.pid)))
            time.sleep(0.02)


def _tree(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(c) for c in children)
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def timed(cmd: list[str], stdout: Path, sample_tree: bool = False) -> tuple[float, int, int]:
    """(wall seconds, peak RSS KiB of the largest process, sampled tree RSS KiB or 0)."""
    with stdout.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=child_env())
        sampler = TreeSampler(proc.pid) if sample_tree and Path("/proc").is_dir() else None
        if sampler:
            sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if sampler:
        sampler.done = True
        sampler.join()
    if proc.returncode not in (0, 1):  # 1: grep found nothing / oomdoctor found an OOM
        raise SystemExit(f"{cmd[0]} failed with exit status {proc.returncode}")
    rss = usage.ru_maxrss if sys.platform != "darwin" else usage.ru_maxrss // 1024
    return wall, rss, sampler.peak_kib if sampler else 0


def verdict(path: Path) -> str:
    data = json.loads(path.read_text())
    v = data["verdict"]
    flags = ",".join(
        f"{a.get('flag')}={a.get('value')}" for a in data.get("actions", []) if a.get("flag")
    )
    return f"{v['category']} / {v.get('rule')} / {flags}"


class Row(NamedTuple):
    variant: str
    size: str
    mb: float
    grep_s: float  # every anchor oomdoctor knows
    simple_s: float  # a dozen memory words
    oomdoctor_s: float
    rss_mib: float
    tree_mib: float
    verdict: str
    busy: bool

    @property
    def ratio(self) -> float:
        return self.oomdoctor_s / self.grep_s

    @property
    def simple_ratio(self) -> float:
        return self.oomdoctor_s / self.simple_s


def bench_size(variant: str, size: str, reps: int, anchors: Path, simple: Path) -> Row:
    log = generated(size, variant=variant)
    warm(log)
    idle = wait_idle()
    mb = log.stat().st_size / 1e6
    grep = ["grep", "-n", "-E", "-f", str(anchors), str(log)]
    simple_grep = ["grep", "-n", "-E", "-f", str(simple), str(log)]
    ood = [*oomdoctor_cmd(), "diagnose", "--format", "json", "--no-gpu", str(log)]
    g_times, s_times, o_times, rss, tree = [], [], [], [], []
    for _ in range(reps):  # alternated, so a slow spell hits all three alike
        g_times.append(timed(grep, OUT / "grep.out")[0])
        s_times.append(timed(simple_grep, OUT / "grep.out")[0])
        wall, peak, tree_peak = timed(ood, OUT / "oomdoctor.json", sample_tree=True)
        o_times.append(wall)
        rss.append(peak)
        tree.append(tree_peak)
    return Row(
        variant,
        size,
        mb,
        statistics.median(g_times),
        statistics.median(s_times),
        statistics.median(o_times),
        max(rss) / 1024,
        max(tree) / 1024,
        verdict(OUT / "oomdoctor.json"),
        not idle,
    )


def bench_startup(reps: int) -> dict[str, float]:
    log = generated("100", lines=True)
    base = [sys.executable, "-c", "import click, rich.console"]
    text = [*oomdoctor_cmd(), "diagnose", "--no-gpu", str(log)]
    js = [*oomdoctor_cmd(), "diagnose", "--format", "json", "--no-gpu", str(log)]
    plain = [*oomdoctor_cmd(), "diagnose", str(log)]  # also asks NVML for the GPU state
    commands = {"import": base, "text": text, "json": js, "default": plain}
    for cmd in commands.values():  # write bytecode caches, warm the page cache
        timed(cmd, OUT / "startup.out")
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(reps):
        for name, cmd in commands.items():
            times[name].append(timed(cmd, OUT / "startup.out")[0])
    return {k: statistics.median(v) for k, v in times.items()}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    grep_version = subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout
    return (
        f"{cpu}, {cores} cores, Python {platform.python_version()}, "
        f"{grep_version.splitlines()[0] if grep_version else 'grep'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10M,100M,512M")
    parser.add_argument("--variants", default="sparse,dense", help="of " + ",".join(VARIANTS))
    parser.add_argument("--blank", default="50M", help="size of the blank-line log ('' skips)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--startup-reps", type=int, default=21)
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also run bench/compiled.py: Hyperscan against the shipped scanner (needs hyperscan)",
    )
    parser.add_argument("--scale", action="store_true", help="also the scaling cases (scale.py)")
    parser.add_argument("--scale-only", action="store_true", help="only the scaling cases")
    parser.add_argument("--scale-sizes", default="", help="N per dimension: pids=10000,...")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.scale_only:
        return _scale(args.scale_sizes, [])
    anchors = OUT / "anchors.txt"
    count = write_anchors(anchors)
    simple = OUT / "simple.txt"
    simple.write_text("".join(a + "\n" for a in SIMPLE_ANCHORS))
    print(f"machine: {machine()}")
    print(
        f"grep: all {count} anchors (bench/out/anchors.txt), and a simple memory grep of "
        f"{len(SIMPLE_ANCHORS)} words (bench/out/simple.txt); {args.reps} alternated runs, medians\n"
    )
    plan = [(v, size) for v in args.variants.split(",") for size in args.sizes.split(",")]
    if args.blank:
        plan.append(("blank", args.blank))
    rows = [bench_size(v, size, args.reps, anchors, simple) for v, size in plan]
    print(
        "| log | size | grep (all anchors) | simple grep | oomdoctor | ratio to all | "
        "ratio to simple | MB/s | peak RSS | tree RSS |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        flag = " (busy)" if r.busy else ""
        print(
            f"| {r.variant}{flag} | {r.size} | {r.grep_s:.2f} s | {r.simple_s:.2f} s "
            f"| {r.oomdoctor_s:.2f} s | {r.ratio:.2f}× | {r.simple_ratio:.2f}× "
            f"| {r.mb / r.oomdoctor_s:.0f} | {r.rss_mib:.0f} MiB | {r.tree_mib:.0f} MiB |"
        )
    start = bench_startup(args.startup_reps)
    print(f"\nstart-up, 100-line log ({args.startup_reps} runs, medians):")
    print(f"  python -c 'import click, rich.console'   {start['import'] * 1000:6.1f} ms")
    print(
        f"  oomdoctor diagnose --no-gpu (text)        {start['text'] * 1000:6.1f} ms "
        f"({start['text'] / start['import']:.2f}×)"
    )
    print(
        f"  oomdoctor diagnose --format json --no-gpu {start['json'] * 1000:6.1f} ms "
        f"({start['json'] / start['import']:.2f}×)"
    )
    print(
        f"  oomdoctor diagnose (text, live GPU state)  {start['default'] * 1000:6.1f} ms "
        f"({start['default'] / start['import']:.2f}×; NVML's own start-up where there is a GPU)"
    )
    served = [r for r in rows if r.variant != "blank"]
    verdicts = {(r.variant, r.verdict) for r in served}
    for v in sorted({r.variant for r in served}):
        print(f"verdict, {v} log: {' | '.join(sorted(x for w, x in verdicts if w == v))}")
    checks = []
    by = {(r.variant, r.size.upper()): r for r in rows}
    if ("dense", "512M") in by:
        checks.append(("dense 512 MB ≤ 2.5 × simple grep", by["dense", "512M"].simple_ratio <= 2.5))
    if ("sparse", "512M") in by:
        checks.append(("sparse 512 MB ≤ 1 × simple grep", by["sparse", "512M"].simple_ratio <= 1))
    blank = [r for r in rows if r.variant == "blank"]
    if blank:
        checks.append((f"blank {blank[0].size} ≤ 3 × simple grep", blank[0].simple_ratio <= 3))
    checks.append(("peak RSS ≤ 100 MB at every size", all(r.rss_mib * MIB <= 100e6 for r in rows)))
    for v in {r.variant for r in served}:
        mine = sorted((r for r in served if r.variant == v), key=lambda r: r.mb)
        if len(mine) > 1:
            checks.append(
                (
                    f"{v}: RSS at the largest within 20% of the smallest",
                    mine[-1].rss_mib <= 1.2 * mine[0].rss_mib,
                )
            )
    for v in {r.variant for r in served}:
        big = sorted((r for r in served if r.variant == v and r.mb >= 100), key=lambda r: r.mb)
        if len(big) > 1:  # below ~100 MB the start-up is most of the time
            a, b = big[-2], big[-1]
            checks.append(
                (
                    f"{v}: time linear in size ({a.size} -> {b.size}: within 25%)",
                    b.oomdoctor_s / a.oomdoctor_s <= 1.25 * b.mb / a.mb,
                )
            )
    # The target is on the benchmark's own command (json, no GPU); the text report adds rich's
    # rendering (~5 ms) and is printed above for comparison, not checked.
    checks.append(("start-up (json) ≤ 2 × import", start["json"] <= 2 * start["import"]))
    checks.append(
        (
            "same verdict at every size",
            all(len({x for w, x in verdicts if w == v}) == 1 for v, _ in verdicts),
        )
    )
    if any(r.busy for r in rows):
        print("  NOTE  the machine was busy for rows marked (busy): their times are not the tool's")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    if args.scale:
        return _scale(args.scale_sizes, checks) or (0 if all(ok for _, ok in checks) else 1)
    if args.compiled:  # item 4 of issue 15: one compiled option, measured beside the engine
        print()
        sys.stdout.flush()
        subprocess.run([sys.executable, str(HERE / "compiled.py")], check=False, env=child_env())
    return 0 if all(ok for _, ok in checks) else 1


def _scale(sizes: str, checks: list[tuple[str, bool]]) -> int:
    """The scaling cases (bench/scale.py); 1 if one of them, or of ``checks``, fails."""
    import scale  # bench/scale.py, beside this file

    found = scale.run(scale.parse_sizes(sizes))
    for name, ok in found:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in [*checks, *found]) else 1


if __name__ == "__main__":
    sys.exit(main())
