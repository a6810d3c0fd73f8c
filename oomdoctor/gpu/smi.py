"""Fallback when NVML cannot be loaded from Python: run `nvidia-smi -q -x` and parse it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from datetime import datetime

from oomdoctor.gpu.loaders import parse_xml
from oomdoctor.gpu.snapshot import Snapshot, SnapshotError
from oomdoctor.gpu.view import Unavailable

TIMEOUT_S = 30


def take() -> Snapshot | Unavailable:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return Unavailable("nvidia-smi is not on PATH")
    try:
        proc = subprocess.run(
            [exe, "-q", "-x"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Unavailable(f"nvidia-smi could not run: {exc}")
    if proc.returncode != 0:
        first = (proc.stdout or proc.stderr).strip().splitlines()[:1]
        return Unavailable(
            f"nvidia-smi failed ({proc.returncode}): {' '.join(first) or 'no output'}"
        )
    try:
        snap = parse_xml(proc.stdout)
    except SnapshotError as exc:
        return Unavailable(f"nvidia-smi output could not be read: {exc}")
    from dataclasses import replace

    return replace(
        snap,
        time=datetime.now().astimezone().isoformat(timespec="seconds"),
        host=socket.gethostname(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
