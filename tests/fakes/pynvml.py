"""A fake `pynvml` for subprocess tests: one H100 with one foreign process.

It records when NVML was initialised (FAKE_NVML_STAMP), so a test can check that the snapshot
was taken between the crash line and the server's exit.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace


class NVMLError(Exception):
    pass


nvmlMemory_v2 = 0x02000028
NVML_DEVICE_MIG_ENABLE = 1
_TOTAL = 81559 << 20


def nvmlInit() -> None:
    stamp = os.environ.get("FAKE_NVML_STAMP")
    if stamp:
        with open(stamp, "w") as fh:  # noqa: PTH123 - a fake module, kept dependency-free
            fh.write(repr(time.time()))


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return i


def nvmlDeviceGetPciInfo(h: int) -> SimpleNamespace:
    return SimpleNamespace(busId="00000000:18:00.0")


def nvmlDeviceGetUUID(h: int) -> str:
    return "GPU-fake-0000"


def nvmlDeviceGetName(h: int) -> str:
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetMemoryInfo(h: int, version: object = None) -> SimpleNamespace:
    return SimpleNamespace(total=_TOTAL, used=_TOTAL - (1 << 30), free=1 << 30, reserved=0)


def nvmlDeviceGetMigMode(h: int) -> list[int]:
    return [0, 0]


def nvmlDeviceGetComputeRunningProcesses(h: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=4242, usedGpuMemory=12 << 30)]


def nvmlSystemGetDriverVersion() -> str:
    return "550.54.15"


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    return 12040
