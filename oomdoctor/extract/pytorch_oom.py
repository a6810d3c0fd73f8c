"""Parse GPU out-of-memory messages into numbers (GiB).

Every field is optional: users paste truncated or re-wrapped messages, and older PyTorch builds
print other sentences. Formats: ../shared/reference/pytorch-oom.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from oomdoctor import units
from oomdoctor.model import OomMessage
from oomdoctor.units import integer

#: A size: never starting inside a longer number, at most 20 digits a part (units.SIZE_NUMBER),
#: so that a hostile run of thousands of digits costs one pass, not one per digit; any unit of
#: units.SIZE_UNIT (PiB, EiB, KB = 10^3 bytes, ...), scientific notation and decimal commas.
_SIZE = (
    r"(?<![\d.,])(?P<{name}>" + units.SIZE_NUMBER.replace("{", "{{").replace("}", "}}") + r") ?"
    r"(?P<{name}_u>" + units.SIZE_UNIT + r")"
)


def _size(name: str) -> str:
    return _SIZE.format(name=name)


class _Words:
    """A pattern whose spaces may be missing or doubled: a message re-wrapped by hand loses the
    space at every break (or gains one inside a word), so the pieces are read joined with nothing
    between them and every space in a pattern matches any run of whitespace, or none.

    Compiled on first use: most runs never meet an OOM message, and start-up time matters."""

    __slots__ = ("_compiled", "_source")

    def __init__(self, pattern: str) -> None:
        self._source = pattern.replace(" ?", " ").replace(" ", r"\s*")
        self._compiled: re.Pattern[str] | None = None

    def _get(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._source)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self._get().search(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self._get().finditer(text)


_words = _Words


_REQUESTED = _words(r"Tried to allocate " + _size("req"))
_MODERN = _words(
    r"GPU ?(?P<gpu>\d*) has a total capac(?:i)?ty of "
    + _size("total")
    + r"(?: of which "
    + _size("free")
    + r" is free)?"
)
_OTHER = _words(r"Process (?P<pid>\d+) has " + _size("m") + r" memory in use")
_SELF = _words(r"this process has " + _size("m") + r" memory in use")
_ALLOWED = _words(_size("allowed") + r" allowed;")
_ALLOCATED = _words(r"Of the allocated memory " + _size("alloc") + r" is allocated by PyTorch")
_PRIVATE = _words(_size("pool") + r" allocated in private pools")
_UNALLOC = _words(r"and " + _size("r") + r" is reserved by PyTorch but unallocated")
#: The torch 1.x / 2.0 layout, also Ascend's NPU allocator (pytorch-oom.md §5.2, §5.9): the
#: parenthesised fields are read one by one, so a field an older build lacks (`current active`)
#: or a paste cut off inside the parentheses still yields the others.
_LEGACY = _words(r"\((?P<dev>GPU|NPU) ?(?P<gpu>\d+); (?P<fields>[^)]*)")
_LEGACY_FIELD = _words(
    _size("v")
    + r" (?P<what>total capacity|already allocated|current active|free|allowed|reserved in total "
    r"by PyTorch|cached)"
)
#: `NPU out of memory. NPUWorkspaceAllocator tried to allocate 180.00 MiB(NPU 0; ...)`.
_WORKSPACE = _words(r"NPUWorkspaceAllocator tried to allocate " + _size("req"))
#: vLLM's sampler warm-up wraps the OOM in its own sentence (no numbers of the GPU).
_SAMPLER = _words(r"warming up sampler with (?P<n>\d+) dummy requests")
_SPACE = re.compile(r"\s+")


def _gib(m: re.Match[str], name: str) -> float | None:
    value = m.group(name)
    if value is None:
        return None
    return units.to_gib(value, m.group(name + "_u"))


def _first(pattern: _Words, text: str, name: str) -> float | None:
    m = pattern.search(text)
    return _gib(m, name) if m else None


def parse_oom(text: str) -> OomMessage:
    """Numbers of a PyTorch allocator OOM ("CUDA out of memory. Tried to allocate ...")."""
    requested = _first(_REQUESTED, text, "req")
    if requested is None:
        requested = _first(_WORKSPACE, text, "req")
    legacy = _LEGACY.search(text)
    if legacy:
        fields: dict[str, float | None] = {}
        for m in _LEGACY_FIELD.finditer(legacy.group("fields")):
            fields.setdefault(_SPACE.sub("", m.group("what")), _gib(m, "v"))
        reserved = fields.get("reservedintotalbyPyTorch")
        if reserved is None:
            reserved = fields.get("cached")
        return OomMessage(
            form="npu" if legacy.group("dev") == "NPU" else "pytorch_legacy",
            requested_gib=requested,
            gpu=integer(legacy.group("gpu")),
            total_gib=fields.get("totalcapacity"),
            free_gib=fields.get("free"),
            allowed_gib=fields.get("allowed"),
            allocated_gib=fields.get("alreadyallocated"),
            reserved_total_gib=reserved,
            complete=reserved is not None or ")" in text[legacy.end() : legacy.end() + 1],
        )
    modern = _MODERN.search(text)
    gpu: int | None = None
    total = free = None
    if modern:
        gpu = integer(modern.group("gpu"))
        total = _gib(modern, "total")
        free = _gib(modern, "free")
    processes = tuple(
        (pid, _gib(m, "m") or 0.0)
        for m in _OTHER.finditer(text)
        if (pid := integer(m.group("pid"))) is not None
    )
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


def parse_wrapped(parts: list[str]) -> OomMessage:
    """A message a logger or a user re-wrapped over several lines. A wrap can fall between two
    words, inside a word (`capa` / `city`) or between a number and its unit, so the pieces are
    read joined with nothing between them (every pattern tolerates missing spaces)."""
    if len(parts) < 2:
        return parse_oom(parts[0] if parts else "")
    return parse_oom("".join(p.strip() for p in parts))


def sampler_requests(text: str) -> int | None:
    """vLLM V1: `CUDA out of memory occurred when warming up sampler with N dummy requests`."""
    m = _SAMPLER.search(text)
    return integer(m.group("n")) if m else None


def needs_more(text: str) -> bool:
    """True while a wrapped allocator message has not reached its last number yet."""
    if "reserved by PyTorch" in text or "reserved in total by PyTorch" in text:
        return False
    if "NPUWorkspaceAllocator" in text and " free)" in text:
        return False
    return "..." not in text[-8:]  # a user's elision: nothing more is coming


def bare(form: str) -> OomMessage:
    """An OOM that carries no numbers (driver-level CUDA error, cuBLAS, NCCL, Triton)."""
    return OomMessage(form=form, complete=False)
