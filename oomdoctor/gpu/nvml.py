"""The live snapshot, through NVML (``pynvml`` from the ``nvidia-ml-py`` package).

This is the only module that imports pynvml. Every NVML call goes through ``_nv``, which turns a
driver error (no library, no permission, not supported, MIG) into "not available" (None), so a
partial answer is still an answer. Processes whose PID is not visible here (another PID namespace)
are kept, unnamed.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from oomdoctor.gpu.view import Unavailable

if TYPE_CHECKING:  # loaded by _read: a machine without a driver never needs them
    from oomdoctor.gpu.snapshot import Device, Process, Snapshot

T = TypeVar("T")
_HINTS = MappingProxyType(
    {
        "LibraryNotFound": "`oomdoctor snapshot` on the GPU host, then --snapshot",
        "NoPermission": "NVML refused access: run as a user that can use the GPUs",
        "DriverNotLoaded": "the NVIDIA kernel driver is not loaded on this machine",
    }
)


def _import() -> Any:
    with warnings.catch_warnings():
        # The deprecated `pynvml` distribution, if installed next to nvidia-ml-py, warns on import
        # although the module itself comes from nvidia-ml-py.
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml

    return pynvml


def _nv(nvml: Any, fn: Callable[..., T], *args: Any) -> T | None:
    """Call an NVML function; any NVML error (or a missing function) means "not available"."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None
    except (AttributeError, TypeError, OSError):
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _error_name(nvml: Any, exc: Exception) -> str:
    for name in _HINTS:
        cls = getattr(nvml, f"NVMLError_{name}", None)
        if cls is not None and isinstance(exc, cls):
            return name
    return type(exc).__name__


def _no_driver_library() -> bool:
    """True when the NVML library certainly cannot load: on Linux pynvml opens
    ``libnvidia-ml.so.1`` and nothing else, so trying that first (~2 ms) spares a machine without
    a driver the import of pynvml (~20 ms, most of a short run). Skipped when pynvml is already
    loaded, or when OOMDOCTOR_NVML_PRECHECK=0 (test fakes; a library under another name)."""
    if not sys.platform.startswith("linux") or "pynvml" in sys.modules:
        return False
    if os.environ.get("OOMDOCTOR_NVML_PRECHECK") == "0":
        return False
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


#: Seconds NVML has to answer, all calls together. After an Xid error a driver can hang in
#: nvmlInit or a query for ever; the run goes on without the GPU state and says why.
#: OOMDOCTOR_NVML_TIMEOUT_S overrides it (tests with a fake driver that hangs).
TIMEOUT_S = 10.0


def _timeout() -> float:
    try:
        value = float(os.environ.get("OOMDOCTOR_NVML_TIMEOUT_S", TIMEOUT_S))
    except ValueError:
        return TIMEOUT_S
    return value if 0 < value < 3600 else TIMEOUT_S


def take(proc_root: Path = Path("/proc")) -> Snapshot | Unavailable:
    """A snapshot of every GPU and its compute processes, or why there is none (also when NVML
    does not answer within TIMEOUT_S: the calls go on in a daemon thread, the run does not)."""
    from oomdoctor.read.bounded import TimedOut, call_with_timeout

    timeout = _timeout()
    result = call_with_timeout(lambda: _take(proc_root), timeout, "oomdoctor-nvml")
    if isinstance(result, TimedOut):
        return Unavailable(
            f"NVML did not answer within {timeout:g} s (a hung driver, as after an Xid error); "
            "the GPU state was not read",
            "check `dmesg` for Xid errors; `nvidia-smi` may hang the same way",
        )
    return result


def _take(proc_root: Path) -> Snapshot | Unavailable:
    if _no_driver_library():
        return Unavailable(
            "no NVIDIA driver here",
            _HINTS["LibraryNotFound"],
        )
    try:
        nvml = _import()
    except ImportError:
        return Unavailable("the nvidia-ml-py package (pynvml) is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, or OSError from the loader
        name = _error_name(nvml, exc)
        return Unavailable(f"NVML is not available: {exc or name}", _HINTS.get(name))
    try:
        return _read(nvml, proc_root)
    finally:
        _nv(nvml, nvml.nvmlShutdown)


def _memory(nvml: Any, handle: Any) -> tuple[int | None, int | None, int | None, int | None]:
    """(total, used, free, reserved): the v2 struct where the driver has it (its `used`
    excludes reserved memory; v1's `used` includes it and is wrong on newer drivers)."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    info = _nv(nvml, nvml.nvmlDeviceGetMemoryInfo, handle, version) if version is not None else None
    if info is not None:
        return info.total, info.used, info.free, getattr(info, "reserved", None)
    info = _nv(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    if info is None:
        return None, None, None, None
    return info.total, info.used, info.free, None


def _mig(nvml: Any, handle: Any) -> str | None:
    modes = _nv(nvml, nvml.nvmlDeviceGetMigMode, handle)
    if not modes:
        return None
    current = modes[0] if isinstance(modes, (list, tuple)) else modes
    return "enabled" if current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1) else "disabled"


def _read(nvml: Any, proc_root: Path) -> Snapshot:
    import socket

    from oomdoctor.gpu.identify import lineage
    from oomdoctor.gpu.snapshot import Device, Process, Snapshot, norm_bus_id

    devices: list[Device] = []
    processes: list[Process] = []
    notes: list[str] = []
    count = _nv(nvml, nvml.nvmlDeviceGetCount) or 0
    for index in range(count):
        handle = _nv(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            notes.append(f"GPU {index}: NVML gave no handle")
            continue
        pci = _nv(nvml, nvml.nvmlDeviceGetPciInfo, handle)
        bus = norm_bus_id(_text(getattr(pci, "busId", None))) if pci is not None else None
        uuid = _text(_nv(nvml, nvml.nvmlDeviceGetUUID, handle))
        total, used, free, reserved = _memory(nvml, handle)
        devices.append(
            Device(
                index=index,
                uuid=uuid,
                pci_bus_id=bus,
                name=_text(_nv(nvml, nvml.nvmlDeviceGetName, handle)),
                total_bytes=total,
                used_bytes=used,
                free_bytes=free,
                reserved_bytes=reserved,
                mig_mode=_mig(nvml, handle),
            )
        )
        running = _nv(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if running is None:
            notes.append(f"GPU {index}: NVML could not list its processes")
            continue
        for info in running:
            pid = int(info.pid)
            # `usedGpuMemory` is None (NOT_AVAILABLE) on MIG and WDDM: unknown, not zero.
            used_mem = getattr(info, "usedGpuMemory", None)
            name, cmdline = _describe(pid, proc_root)
            ppid, started = lineage(pid, proc_root)  # this server is told by evidence (identify)
            processes.append(
                Process(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_bus_id=bus,
                    used_bytes=int(used_mem) if isinstance(used_mem, int) else None,
                    name=name,
                    cmdline=cmdline,
                    visible=(proc_root / str(pid)).exists(),
                    kind="C",
                    ppid=ppid,
                    start_time=started,
                )
            )
    return Snapshot(
        source="nvml",
        time=datetime.now().astimezone().isoformat(timespec="seconds"),
        host=socket.gethostname(),
        driver_version=_text(_nv(nvml, nvml.nvmlSystemGetDriverVersion)),
        cuda_version=_cuda_version(nvml),
        devices=tuple(devices),
        processes=tuple(processes),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        notes=tuple(notes),
    )


def _cuda_version(nvml: Any) -> str | None:
    version = _nv(nvml, nvml.nvmlSystemGetCudaDriverVersion_v2)
    if version is None:
        version = _nv(nvml, nvml.nvmlSystemGetCudaDriverVersion)
    if not isinstance(version, int):
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _describe(pid: int, proc_root: Path) -> tuple[str | None, str | None]:
    """Name and command line from /proc; None where the PID is not visible from here."""
    base = proc_root / str(pid)
    try:
        raw = (base / "cmdline").read_bytes()
    except OSError:
        raw = b""
    cmdline = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or None
    try:
        name: str | None = (base / "comm").read_text("utf-8", "replace").strip() or None
    except OSError:
        name = None
    if cmdline and cmdline.startswith("sglang::"):
        name = cmdline.split()[0]  # setproctitle: the full title, not the 15-character comm
    return name, cmdline
