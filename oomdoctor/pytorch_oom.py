"""Parse GPU out-of-memory messages into numbers (GiB).

Every field is optional: users paste truncated or re-wrapped messages, and older PyTorch builds
print other sentences. Formats: ../shared/reference/pytorch-oom.md.
"""

from __future__ import annotations

import re

from oomdoctor.model import OomMessage

_SIZE = r"(?P<{name}>\d+(?:\.\d+)?) ?(?P<{name}_u>bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB)"
_UNITS = {
    "bytes": 1 / 2**30,
    "B": 1 / 2**30,
    "KiB": 1 / 2**20,
    "KB": 1 / 2**20,
    "MiB": 1 / 2**10,
    "MB": 1 / 2**10,
    "GiB": 1.0,
    "GB": 1.0,
    "TiB": 2**10,
}


def _size(name: str) -> str:
    return _SIZE.format(name=name)


_REQUESTED = re.compile(r"Tried to allocate " + _size("req"))
_MODERN = re.compile(
    r"GPU ?(?P<gpu>\d*) has a total capac(?:i)?ty of "
    + _size("total")
    + r"(?: of which "
    + _size("free")
    + r" is free)?"
)
_OTHER = re.compile(r"Process (?P<pid>\d+) has " + _size("m") + r" memory in use")
_SELF = re.compile(r"this process has " + _size("m") + r" memory in use")
_ALLOWED = re.compile(_size("allowed") + r" allowed;")
_ALLOCATED = re.compile(r"Of the allocated memory " + _size("alloc") + r" is allocated by PyTorch")
_PRIVATE = re.compile(_size("pool") + r" allocated in private pools")
_UNALLOC = re.compile(r"and " + _size("r") + r" is reserved by PyTorch but unallocated")
_LEGACY = re.compile(
    r"\(GPU (?P<gpu>\d+); "
    + _size("total")
    + r" total capacity; "
    + _size("alloc")
    + r" already allocated; "
    + _size("free")
    + r" free; (?:"
    + _size("allowed")
    + r" allowed; )?"
    + _size("rt")
    + r" reserved in total by PyTorch\)"
)


def _gib(m: re.Match[str], name: str) -> float | None:
    value = m.group(name)
    if value is None:
        return None
    return float(value) * _UNITS[m.group(name + "_u")]


def _first(pattern: re.Pattern[str], text: str, name: str) -> float | None:
    m = pattern.search(text)
    return _gib(m, name) if m else None


def parse_oom(text: str) -> OomMessage:
    """Numbers of a PyTorch allocator OOM ("CUDA out of memory. Tried to allocate ...")."""
    requested = _first(_REQUESTED, text, "req")
    legacy = _LEGACY.search(text)
    if legacy:
        return OomMessage(
            form="pytorch_legacy",
            requested_gib=requested,
            gpu=int(legacy.group("gpu")),
            total_gib=_gib(legacy, "total"),
            free_gib=_gib(legacy, "free"),
            allowed_gib=_gib(legacy, "allowed"),
            allocated_gib=_gib(legacy, "alloc"),
            reserved_total_gib=_gib(legacy, "rt"),
            complete=True,
        )
    modern = _MODERN.search(text)
    gpu: int | None = None
    total = free = None
    if modern:
        gpu = int(modern.group("gpu")) if modern.group("gpu") else None
        total = _gib(modern, "total")
        free = _gib(modern, "free")
    processes = tuple((int(m.group("pid")), _gib(m, "m") or 0.0) for m in _OTHER.finditer(text))
    unalloc = _first(_UNALLOC, text, "r")
    return OomMessage(
        form="pytorch",
        requested_gib=requested,
        gpu=gpu,
        total_gib=total,
        free_gib=free,
        this_process_gib=_first(_SELF, text, "m"),
        processes=processes,
        allowed_gib=_first(_ALLOWED, text, "allowed"),
        allocated_gib=_first(_ALLOCATED, text, "alloc"),
        private_pools_gib=_first(_PRIVATE, text, "pool"),
        reserved_unallocated_gib=unalloc,
        complete=unalloc is not None,
    )


def needs_more(text: str) -> bool:
    """True while a wrapped allocator message has not reached its last number yet."""
    if "reserved by PyTorch" in text or "reserved in total by PyTorch" in text:
        return False
    return "..." not in text[-8:]  # a user's elision: nothing more is coming


def bare(form: str) -> OomMessage:
    """An OOM that carries no numbers (driver-level CUDA error, cuBLAS, NCCL, Triton)."""
    return OomMessage(form=form, complete=False)
