"""Where a diagnosis gets the GPU state: a snapshot file, NVML now, or the capture at the crash.

Shared by ``diagnose`` (with and without ``--follow``) and ``watch``. pynvml and the snapshot
loaders are imported only when a state is actually read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oomdoctor.cli.common import fail


def gpu_state(snapshots: tuple[str, ...], no_gpu: bool) -> Any:
    """A loaded snapshot, a live one, or why there is none (--no-gpu never imports pynvml)."""
    from oomdoctor.gpu.view import Unavailable

    if no_gpu:
        return Unavailable("not read (--no-gpu)")
    if snapshots:
        from oomdoctor.gpu.loaders import load
        from oomdoctor.gpu.snapshot import SnapshotError

        try:
            return load([Path(s) for s in snapshots])
        except SnapshotError as exc:
            fail(
                f"cannot read the snapshot: {exc}",
                "give `oomdoctor snapshot` JSON, `nvidia-smi -q -x` XML, or nvidia-smi CSV output",
            )
    from oomdoctor.gpu import nvml

    return nvml.take()


def live_snapshotter(no_gpu: bool, snapshots: tuple[str, ...]) -> Any:
    """What to call at the crash: NVML now, unless the user gave a file or --no-gpu."""
    if no_gpu or snapshots:
        return None
    from oomdoctor.gpu import nvml

    return nvml.take


def after_capture(capture: Any, snapshots: tuple[str, ...], no_gpu: bool) -> Any:
    """The GPU state for a live run: the crash-time snapshot, a given file, or why there is none."""
    from oomdoctor.gpu.view import Unavailable

    if capture.snapshot is not None:
        return capture.snapshot
    if snapshots or no_gpu:
        return gpu_state(snapshots, no_gpu)
    if capture.crash_line is not None:  # seen, but the snapshot it started never came back
        return Unavailable(
            f"the GPU snapshot taken at the crash line (line {capture.crash_line.number}) "
            "did not finish (NVML did not answer)"
        )
    return Unavailable("no crash signature was seen, so no snapshot was taken")


def capture_fields(capture: Any) -> dict[str, Any] | None:
    """The report's ``capture`` section: the crash line, and when the crash and snapshot were."""
    from datetime import datetime

    def iso(t: float | None) -> str | None:
        return (
            None
            if t is None
            else datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")
        )

    if capture.crash_line is None:
        return None
    return {
        "crash_line": capture.crash_line.number,
        "crash_time": iso(capture.crash_time),
        "snapshot_time": iso(capture.snapshot_time),
        "snapshot_after_s": None
        if capture.snapshot_time is None or capture.crash_time is None
        else round(capture.snapshot_time - capture.crash_time, 3),
    }
