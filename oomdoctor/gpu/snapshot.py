"""One snapshot type for every source: live NVML, nvidia-smi XML/CSV, oomdoctor's own JSON.

A value a source cannot give is None ("not available"), never 0: on MIG or WDDM per-process
memory is unknown, and a process in another PID namespace has no name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oomdoctor.units import MAX_NUMBER

SCHEMA = "oomdoctor-snapshot"
VERSION = 1
GIB = float(1 << 30)


@dataclass(frozen=True, slots=True)
class Device:
    index: int | None
    uuid: str | None
    pci_bus_id: str | None  # normalised: 8-digit domain, lower-case, e.g. "00000000:3b:00.0"
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    reserved_bytes: int | None = None
    mig_mode: str | None = None  # "enabled", "disabled" or None

    @property
    def label(self) -> str:
        bits = [f"GPU {self.index}" if self.index is not None else "GPU ?"]
        if self.name:
            bits.append(self.name)
        if self.pci_bus_id:
            bits.append(self.pci_bus_id)
        return " · ".join(bits)


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    gpu_uuid: str | None
    gpu_bus_id: str | None
    used_bytes: int | None  # None: the driver does not say (MIG, WDDM)
    name: str | None  # None: not visible from here (another PID namespace)
    cmdline: str | None = None
    visible: bool | None = None  # the PID exists in the snapshot taker's namespace
    kind: str | None = None  # "C", "G", "C+G"
    ppid: int | None = None  # its parent, where the snapshot taker could see it
    start_time: str | None = None  # when it started (ISO 8601, the host's local time)


@dataclass(frozen=True, slots=True)
class Snapshot:
    source: str  # "nvml", "nvidia-smi -q -x", "nvidia-smi csv", "oomdoctor json"
    time: str | None  # ISO 8601 with offset when known
    host: str | None
    driver_version: str | None
    cuda_version: str | None
    devices: tuple[Device, ...]
    processes: tuple[Process, ...]
    cuda_visible_devices: str | None = None
    notes: tuple[str, ...] = ()

    def device_of(self, process: Process) -> Device | None:
        """The device a process runs on, matched by UUID or PCI bus id (never by index)."""
        for device in self.devices:
            if process.gpu_uuid and device.uuid and process.gpu_uuid == device.uuid:
                return device
            if (
                process.gpu_bus_id
                and device.pci_bus_id
                and norm_bus_id(process.gpu_bus_id) == device.pci_bus_id
            ):
                return device
        return None

    def processes_on(self, device: Device) -> tuple[Process, ...]:
        return tuple(p for p in self.processes if self.device_of(p) is device)

    def cuda_total_gib(self) -> float | None:
        """The GPUs' total memory when every device has the same: NVML's total minus the
        driver's reservation, which is what CUDA (and vLLM) call total."""
        sizes = {d.total_bytes - (d.reserved_bytes or 0) for d in self.devices if d.total_bytes}
        return sizes.pop() / GIB if len(sizes) == 1 else None


def norm_bus_id(bus: str | None) -> str | None:
    """``00000000:3B:00.0`` / ``0000:3b:00.0`` → ``00000000:3b:00.0``."""
    if not bus:
        return None
    bus = bus.strip().lower()
    parts = bus.split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-8:].rjust(8, "0")
        return ":".join(parts)
    return bus


def to_json(snap: Snapshot) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "source": snap.source,
        "time": snap.time,
        "host": snap.host,
        "driver_version": snap.driver_version,
        "cuda_version": snap.cuda_version,
        "cuda_visible_devices": snap.cuda_visible_devices,
        "devices": [
            {
                "index": d.index,
                "uuid": d.uuid,
                "pci_bus_id": d.pci_bus_id,
                "name": d.name,
                "memory_total_bytes": d.total_bytes,
                "memory_used_bytes": d.used_bytes,
                "memory_free_bytes": d.free_bytes,
                "memory_reserved_bytes": d.reserved_bytes,
                "mig_mode": d.mig_mode,
            }
            for d in snap.devices
        ],
        "processes": [
            {
                "pid": p.pid,
                "gpu_uuid": p.gpu_uuid,
                "gpu_bus_id": p.gpu_bus_id,
                "used_bytes": p.used_bytes,
                "name": p.name,
                "cmdline": p.cmdline,
                "visible": p.visible,
                "type": p.kind,
                "ppid": p.ppid,
                "start_time": p.start_time,
            }
            for p in snap.processes
        ],
        "notes": list(snap.notes),
    }


class SnapshotError(ValueError):
    """A snapshot file that cannot be read, with the reason."""


def _int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{what} must be an integer or null, not {repr(value)[:40]}")
    if not 0 <= value <= MAX_NUMBER:  # a signed 64-bit integer: no GPU or pid gets there
        raise SnapshotError(f"{what} is out of range: {str(value)[:40]}")
    return value


def _str(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise SnapshotError(f"{what} must be a string or null, not {repr(value)[:40]}")
    return value


def from_json(data: Mapping[str, Any]) -> Snapshot:
    """Parse oomdoctor's own snapshot JSON (schema ``oomdoctor-snapshot``, version 1)."""
    if data.get("schema") != SCHEMA:
        raise SnapshotError(f'not an oomdoctor snapshot (no "schema": "{SCHEMA}")')
    if data.get("version") != VERSION:
        raise SnapshotError(
            f"snapshot version {repr(data.get('version'))[:40]} is not supported (want {VERSION})"
        )
    devices_raw = data.get("devices")
    processes_raw = data.get("processes")
    if not isinstance(devices_raw, list) or not isinstance(processes_raw, list):
        raise SnapshotError('"devices" and "processes" must be lists')
    devices = []
    for i, d in enumerate(devices_raw):
        if not isinstance(d, dict):
            raise SnapshotError(f"devices[{i}] must be an object")
        devices.append(
            Device(
                index=_int(d.get("index"), f"devices[{i}].index"),
                uuid=_str(d.get("uuid"), f"devices[{i}].uuid"),
                pci_bus_id=norm_bus_id(_str(d.get("pci_bus_id"), f"devices[{i}].pci_bus_id")),
                name=_str(d.get("name"), f"devices[{i}].name"),
                total_bytes=_int(d.get("memory_total_bytes"), f"devices[{i}].memory_total_bytes"),
                used_bytes=_int(d.get("memory_used_bytes"), f"devices[{i}].memory_used_bytes"),
                free_bytes=_int(d.get("memory_free_bytes"), f"devices[{i}].memory_free_bytes"),
                reserved_bytes=_int(
                    d.get("memory_reserved_bytes"), f"devices[{i}].memory_reserved_bytes"
                ),
                mig_mode=_str(d.get("mig_mode"), f"devices[{i}].mig_mode"),
            )
        )
    processes = []
    for i, p in enumerate(processes_raw):
        if not isinstance(p, dict):
            raise SnapshotError(f"processes[{i}] must be an object")
        pid = _int(p.get("pid"), f"processes[{i}].pid")
        if pid is None:
            raise SnapshotError(f"processes[{i}].pid is required")
        visible = p.get("visible")
        processes.append(
            Process(
                pid=pid,
                gpu_uuid=_str(p.get("gpu_uuid"), f"processes[{i}].gpu_uuid"),
                gpu_bus_id=norm_bus_id(_str(p.get("gpu_bus_id"), f"processes[{i}].gpu_bus_id")),
                used_bytes=_int(p.get("used_bytes"), f"processes[{i}].used_bytes"),
                name=_str(p.get("name"), f"processes[{i}].name"),
                cmdline=_str(p.get("cmdline"), f"processes[{i}].cmdline"),
                visible=visible if isinstance(visible, bool) else None,
                kind=_str(p.get("type"), f"processes[{i}].type"),
                ppid=_int(p.get("ppid"), f"processes[{i}].ppid"),
                start_time=_str(p.get("start_time"), f"processes[{i}].start_time"),
            )
        )
    notes = data.get("notes", [])
    return Snapshot(
        source=_str(data.get("source"), "source") or "oomdoctor json",
        time=_str(data.get("time"), "time"),
        host=_str(data.get("host"), "host"),
        driver_version=_str(data.get("driver_version"), "driver_version"),
        cuda_version=_str(data.get("cuda_version"), "cuda_version"),
        devices=tuple(devices),
        processes=tuple(processes),
        cuda_visible_devices=_str(data.get("cuda_visible_devices"), "cuda_visible_devices"),
        notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
    )
