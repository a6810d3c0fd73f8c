"""Fallback when NVML cannot be loaded from Python: run `nvidia-smi -q -x` and parse it."""

from __future__ import annotations

import os
import shutil
import socket
from datetime import datetime

from oomdoctor.gpu.loaders import parse_xml
from oomdoctor.gpu.snapshot import Snapshot, SnapshotError
from oomdoctor.gpu.view import Unavailable
from oomdoctor.read.bounded import BoundedError, run_capped

TIMEOUT_S = 30
#: `nvidia-smi -q -x` of a full 8-GPU host is well under 1 MiB; a flood is stopped here.
MAX_OUTPUT_BYTES = 16 << 20


def take() -> Snapshot | Unavailable:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return Unavailable("nvidia-smi is not on PATH")
    try:
        proc = run_capped([exe, "-q", "-x"], TIMEOUT_S, MAX_OUTPUT_BYTES)
    except BoundedError as exc:
        return Unavailable(f"nvidia-smi could not be read: {exc}")
    # Bytes, decoded here: a driver that prints Latin-1 (a GPU or process name) is no crash.
    stdout = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        first = (stdout or proc.stderr.decode("utf-8", "replace")).strip().splitlines()[:1]
        return Unavailable(
            f"nvidia-smi failed ({proc.returncode}): {' '.join(first)[:300] or 'no output'}"
        )
    try:
        snap = parse_xml(stdout)
    except SnapshotError as exc:
        return Unavailable(f"nvidia-smi output could not be read: {exc}")
    from dataclasses import replace

    return replace(
        snap,
        time=datetime.now().astimezone().isoformat(timespec="seconds"),
        host=socket.gethostname(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
