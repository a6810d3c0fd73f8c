"""A stand-in for the `pynvml` module (nvidia-ml-py): CI has no GPU, so only the driver is faked.

The shapes follow nvidia-ml-py: handles are opaque, memory info has total/free/used (and reserved
in the v2 struct), running processes have pid and usedGpuMemory (None when NOT_AVAILABLE).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


@dataclass
class FakeGpu:
    uuid: str
    bus: str
    name: str
    total: int
    used: int
    reserved: int = 512 << 20
    mig: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes|None)
    deny_processes: bool = False


def make(
    gpus: list[FakeGpu],
    init_error: type[Exception] | None = None,
    no_v2: bool = False,
) -> types.ModuleType:
    """A module object with the pynvml functions oomdoctor uses."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound  # type: ignore[attr-defined]
    m.NVMLError_NoPermission = NVMLError_NoPermission  # type: ignore[attr-defined]
    m.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
    m.NVML_DEVICE_MIG_ENABLE = 1  # type: ignore[attr-defined]
    if not no_v2:
        m.nvmlMemory_v2 = 0x02000028  # type: ignore[attr-defined]
    calls: list[str] = []
    m.calls = calls  # type: ignore[attr-defined]

    def init() -> None:
        calls.append("init")
        if init_error is not None:
            raise init_error("NVML Shared Library Not Found")

    def memory(handle: int, version: Any = None) -> Any:
        g = gpus[handle]
        if version is not None:
            if no_v2:
                raise NVMLError_NotSupported("Not Supported")
            return types.SimpleNamespace(
                total=g.total, used=g.used, free=g.total - g.used - g.reserved, reserved=g.reserved
            )
        return types.SimpleNamespace(
            total=g.total, used=g.used + g.reserved, free=g.total - g.used - g.reserved
        )

    def processes(handle: int) -> list[Any]:
        g = gpus[handle]
        if g.deny_processes:
            raise NVMLError_NoPermission("Insufficient Permissions")
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in g.processes]

    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h].bus)  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: gpus[h].uuid  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: gpus[h].name  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = memory  # type: ignore[attr-defined]
    m.nvmlDeviceGetMigMode = lambda h: [gpus[h].mig, gpus[h].mig]  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = processes  # type: ignore[attr-defined]
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"  # type: ignore[attr-defined]
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040  # type: ignore[attr-defined]
    return m
