#!/usr/bin/env python3
"""A stand-in for `python -m sglang.launch_server`: replays a fixture log, then crashes, hangs
after the crash (as SGLang does), exits cleanly, or kills itself with a signal.

Uvicorn-style lines go to stdout and everything else to stderr, as a real server interleaves
them. Used by the `watch` tests; never imported by oomdoctor.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--mode", choices=["crash", "hang", "clean", "signal"], default="crash")
    ap.add_argument("--burst-mb", type=int, default=0, help="first write this much binary junk")
    ap.add_argument("--one-stream", action="store_true", help="write everything to stderr")
    ap.add_argument("--pidfile")
    ap.add_argument("--exit-stamp", help="write the time just before exiting here")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds between lines")
    args = ap.parse_args()
    if args.pidfile:
        Path(args.pidfile).write_text(str(os.getpid()))
    out, err = sys.stdout.buffer, sys.stderr.buffer
    if args.burst_mb:
        rng = random.Random(7)
        chunk = bytes(rng.getrandbits(8) for _ in range(1 << 16)) + b"\xff\xfe\xc3\x28\n"
        for _ in range(args.burst_mb * 16):
            out.write(chunk)
        out.flush()
    for raw in Path(args.log).read_bytes().splitlines(keepends=True):
        stream = out if (b"HTTP/1.1" in raw and not args.one_stream) else err
        stream.write(raw)
        stream.flush()
        if args.delay:
            time.sleep(args.delay)
    if args.mode == "hang":
        while True:
            time.sleep(1)
    time.sleep(0.3)  # the snapshot must beat the process tree's exit
    if args.exit_stamp:
        Path(args.exit_stamp).write_text(repr(time.time()))
    if args.mode == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    return 0 if args.mode == "clean" else 1


if __name__ == "__main__":
    sys.exit(main())
