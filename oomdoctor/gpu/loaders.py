"""Load a snapshot file, choosing the parser by content: oomdoctor JSON, `nvidia-smi -q -x` XML,
or `nvidia-smi --query-compute-apps/--query-gpu --format=csv` (with or without header and units).

Several files (a compute-apps CSV and a query-gpu CSV) are merged into one snapshot.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from oomdoctor.gpu.snapshot import Device, Process, Snapshot, SnapshotError, from_json, norm_bus_id
from oomdoctor.read.bounded import BoundedError, read_regular
from oomdoctor.units import gib_or_none, integer, number

MIB = 1 << 20
MAX_SNAPSHOT_BYTES = 64 << 20
_BUS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|B)?\s*$")
_UNIT = MappingProxyType({"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30, None: MIB})


def load(paths: Sequence[Path]) -> Snapshot:
    """Read and merge snapshot files; SnapshotError says why a file cannot be used."""
    parts: list[Snapshot] = []
    for path in paths:
        try:
            raw = read_regular(path, MAX_SNAPSHOT_BYTES, pipes=True)
        except BoundedError as exc:
            raise SnapshotError(str(exc)) from None
        text = raw.decode("utf-8-sig", "replace")
        try:
            parts.extend(parse(text))
        except SnapshotError as exc:
            raise SnapshotError(f"{path}: {exc}") from None
    if not parts:
        raise SnapshotError("no snapshot file given")
    return merge(parts)


def parse(text: str) -> list[Snapshot]:
    head = text.lstrip()[:200]
    if head.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnapshotError(f"invalid JSON: {exc}") from None
        except ValueError:  # an integer of more digits than Python converts (4300)
            raise SnapshotError("invalid JSON: a number too long to be a count") from None
        except RecursionError:
            raise SnapshotError("invalid JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise SnapshotError("a JSON snapshot must be an object")
        return [from_json(data)]
    if head.startswith("<"):
        return [parse_xml(text)]
    if not text.strip():
        raise SnapshotError("the file is empty")
    return parse_csv(text)


# -- nvidia-smi -q -x --------------------------------------------------------------------------


def _mib(text: str | None) -> int | None:
    """``81559 MiB`` → bytes; ``N/A``, ``[N/A]``, empty, or a size beyond any GPU
    (units.MAX_GIB) → None."""
    if text is None:
        return None
    m = _SIZE.match(text.replace("[", "").replace("]", ""))
    if not m:
        return None
    amount = number(m.group(1))
    gib = gib_or_none(amount * _UNIT[m.group(2)] / (1 << 30)) if amount is not None else None
    return int(gib * (1 << 30)) if gib is not None else None


def _pid(text: str | None) -> int | None:
    """A pid or GPU index as nvidia-smi prints it (ASCII digits, within units.MAX_NUMBER)."""
    if not text or not (text.isascii() and text.isdigit()):
        return None
    return integer(text)


def _shown(row: list[str]) -> str:
    """A CSV row in a one-line message: short, whatever the file holds."""
    text = repr(row)
    return text if len(text) <= 200 else text[:200] + "…"


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A", "[N/A]") else value


def parse_xml(text: str) -> Snapshot:
    if "<!ENTITY" in text:
        raise SnapshotError("XML with entity declarations is refused (not nvidia-smi output)")
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise SnapshotError(f"invalid XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise SnapshotError(
            f"XML root is <{root.tag[:40]}>, not <nvidia_smi_log> (nvidia-smi -q -x)"
        )
    devices: list[Device] = []
    processes: list[Process] = []
    for position, gpu in enumerate(root.findall("gpu")):
        bus = norm_bus_id(gpu.get("id") or _text(gpu, "pci/pci_bus_id"))
        uuid = _text(gpu, "uuid")
        minor = _text(gpu, "minor_number")
        mig = _text(gpu, "mig_mode/current_mig")
        devices.append(
            Device(
                index=position,  # nvidia-smi lists GPUs in its own index order
                uuid=uuid,
                pci_bus_id=bus,
                name=_text(gpu, "product_name"),
                total_bytes=_mib(_text(gpu, "fb_memory_usage/total")),
                used_bytes=_mib(_text(gpu, "fb_memory_usage/used")),
                free_bytes=_mib(_text(gpu, "fb_memory_usage/free")),
                reserved_bytes=_mib(_text(gpu, "fb_memory_usage/reserved")),
                mig_mode=mig.lower() if mig else None,
            )
        )
        del minor  # minor_number is not the CUDA ordinal either; never used for matching
        for info in gpu.findall("processes/process_info"):
            pid = _pid(_text(info, "pid"))
            if pid is None:
                continue
            processes.append(
                Process(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_bus_id=bus,
                    used_bytes=_mib(_text(info, "used_memory")),
                    name=_text(info, "process_name"),
                    kind=_text(info, "type"),
                )
            )
    if not devices:
        raise SnapshotError("the XML lists no <gpu>")
    return Snapshot(
        source="nvidia-smi -q -x",
        time=_text(root, "timestamp"),
        host=None,
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        devices=tuple(devices),
        processes=tuple(processes),
    )


# -- nvidia-smi --query-*=... --format=csv -----------------------------------------------------

_APP_FIELDS = MappingProxyType(
    {
        "gpu_uuid": "uuid",
        "gpu_bus_id": "bus",
        "pid": "pid",
        "process_name": "name",
        "name": "name",
        "used_gpu_memory": "used",
        "used_memory": "used",
        "gpu_name": "gpu_name",
        "timestamp": "timestamp",
    }
)
_GPU_FIELDS = MappingProxyType(
    {
        "index": "index",
        "uuid": "uuid",
        "pci.bus_id": "bus",
        "name": "name",
        "memory.total": "total",
        "memory.used": "used",
        "memory.free": "free",
        "memory.reserved": "reserved",
    }
)
#: Column order of the documented queries, for `noheader` files.
_GPU_DEFAULT = ("index", "uuid", "bus", "name", "total", "used", "free", "reserved")


def _field(header: str) -> str:
    return re.sub(r"\s*\[.*\]$", "", header.strip())


def _is_header(row: list[str]) -> bool:
    """A row of nvidia-smi field names (``pid``, ``memory.total [MiB]``, ...), not of values."""
    names = [_field(c) for c in row]
    return any(n in _APP_FIELDS or n in _GPU_FIELDS for n in names) and not any(
        c.isdigit() for c in row
    )


def _sections(text: str) -> list[list[list[str]]]:
    """Split CSV text into sections: a header row starts a new one (two queries in one file)."""
    try:
        rows = [
            [c.strip() for c in row]
            for row in csv.reader(io.StringIO(text))
            if any(c.strip() for c in row)
        ]
    except csv.Error as exc:  # a field over csv.field_size_limit (128 KiB), a NUL byte
        raise SnapshotError(f"not nvidia-smi CSV: {exc}") from None
    sections: list[list[list[str]]] = []
    for row in rows:
        if _is_header(row) or not sections:
            sections.append([])
        sections[-1].append(row)
    return sections


def parse_csv(text: str) -> list[Snapshot]:
    out = []
    for section in _sections(text):
        header = [_field(c) for c in section[0]]
        has_header = _is_header(section[0])
        body = section[1:] if has_header else section
        if has_header and "pid" in header:
            out.append(_apps(body, [_APP_FIELDS.get(h, h) for h in header]))
        elif has_header and "memory.total" in header:
            out.append(_gpus(body, [_GPU_FIELDS.get(h, h) for h in header]))
        elif not has_header:
            out.append(_guess(body))
        else:
            raise SnapshotError(
                f"CSV columns {section[0]} are neither --query-compute-apps nor --query-gpu"
            )
    if not out:
        raise SnapshotError("no CSV rows")
    return out


def _apps(rows: list[list[str]], columns: list[str]) -> Snapshot:
    processes = []
    for row in rows:
        rec = dict(zip(columns, row, strict=False))
        pid = _pid(rec.get("pid"))
        if pid is None:
            raise SnapshotError(f"compute-apps row without a numeric pid: {_shown(row)}")
        processes.append(
            Process(
                pid=pid,
                gpu_uuid=rec.get("uuid") or None,
                gpu_bus_id=norm_bus_id(rec.get("bus")),
                used_bytes=_mib(rec.get("used")),
                name=rec.get("name") or None,
            )
        )
    return Snapshot("nvidia-smi csv", None, None, None, None, (), tuple(processes))


def _gpus(rows: list[list[str]], columns: list[str]) -> Snapshot:
    devices = []
    for row in rows:
        rec = dict(zip(columns, row, strict=False))
        index = rec.get("index", "")
        devices.append(
            Device(
                index=_pid(index),
                uuid=rec.get("uuid") or None,
                pci_bus_id=norm_bus_id(rec.get("bus")),
                name=rec.get("name") or None,
                total_bytes=_mib(rec.get("total")),
                used_bytes=_mib(rec.get("used")),
                free_bytes=_mib(rec.get("free")),
                reserved_bytes=_mib(rec.get("reserved")),
            )
        )
    return Snapshot("nvidia-smi csv", None, None, None, None, tuple(devices), ())


def _guess(rows: list[list[str]]) -> Snapshot:
    """`noheader` CSV: recognise compute-apps rows by their pid, query-gpu rows by their index."""
    first = rows[0]
    if first and first[0].isdigit() and any(c.startswith("GPU-") for c in first[1:3]):
        return _gpus(rows, list(_GPU_DEFAULT[: len(first)]))
    processes = []
    for row in rows:
        uuid = next((c for c in row if c.startswith("GPU-")), None)
        bus = next((c for c in row if _BUS.match(c)), None)
        rest = [c for c in row if c not in (uuid, bus)]
        pid_text = next((c for c in rest if _pid(c) is not None), None)
        if pid_text is None:
            raise SnapshotError(f"cannot read a pid in the CSV row {_shown(row)}")
        rest.remove(pid_text)
        size = rest[-1] if rest and (_mib(rest[-1]) is not None or "N/A" in rest[-1]) else None
        names = [c for c in rest if c is not size]
        processes.append(
            Process(
                pid=_pid(pid_text) or 0,
                gpu_uuid=uuid,
                gpu_bus_id=norm_bus_id(bus),
                used_bytes=_mib(size),
                name=names[0] if names else None,
            )
        )
    return Snapshot("nvidia-smi csv", None, None, None, None, (), tuple(processes))


# -- merging ------------------------------------------------------------------------------------


def merge(parts: Sequence[Snapshot]) -> Snapshot:
    """One snapshot from several: devices from whoever has them, processes from all."""
    if len(parts) == 1:
        return parts[0]
    devices: list[Device] = []
    for part in parts:
        for device in part.devices:
            same = next(
                (
                    d
                    for d in devices
                    if (d.uuid and d.uuid == device.uuid)
                    or (d.pci_bus_id and d.pci_bus_id == device.pci_bus_id)
                ),
                None,
            )
            if same is None:
                devices.append(device)
    processes = tuple(p for part in parts for p in part.processes)
    first = parts[0]
    return replace(
        first,
        source=" + ".join(dict.fromkeys(p.source for p in parts)),
        time=next((p.time for p in parts if p.time), None),
        host=next((p.host for p in parts if p.host), None),
        driver_version=next((p.driver_version for p in parts if p.driver_version), None),
        cuda_version=next((p.cuda_version for p in parts if p.cuda_version), None),
        devices=tuple(devices),
        processes=processes,
        notes=tuple(n for p in parts for n in p.notes),
    )
