"""How sizes read in reports (GiB for big figures, MiB/KiB for small ones, never "0.00 GiB"), and
the physical range a logged number must lie in to be believed.

Every number a log prints passes through ``number`` (or ``in_range``) where it is parsed, so no
later stage divides by, converts or allocates from an infinity, a NaN or a 400-digit integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

#: No GPU holds a million GiB (about a petabyte): a size beyond it is a misprint or an attack.
MAX_GIB = 1e6
#: No count a server logs (tokens, bytes, requests, pids, seconds) is beyond a signed 64-bit
#: integer; SGLang prints that very maximum (sys.maxsize) for "no limit", so it must fit.
MAX_NUMBER = 2**63 - 1


def size(gib: float | None) -> str:
    if gib is None:
        return "unknown"
    magnitude = abs(gib)
    if magnitude >= 1.0 or magnitude == 0.0:
        return f"{gib:.2f} GiB"
    if magnitude * 1024 >= 1.0:
        return f"{gib * 1024:.2f} MiB"
    return f"{gib * 1024 * 1024:.2f} KiB"


def in_range(value: float, gib: bool = False) -> bool:
    """Whether a number is one a GPU server could print: finite, and within ±MAX_NUMBER (±MAX_GIB
    for a size in GiB). Safe on any int, however long (it is never converted to a float)."""
    limit = MAX_GIB if gib else MAX_NUMBER
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return -limit <= value <= limit


def parse(text: str) -> int | float | None:
    """The number ``text`` spells (an int when it is integral, else a float), range unchecked;
    None when it is not a number at all."""
    try:
        return int(text)
    except ValueError:  # not an integer, or one with more digits than Python converts
        pass
    try:
        return float(text)
    except ValueError:
        return None


def number(text: str, gib: bool = False) -> int | float | None:
    """A logged number, or None when it is not one or lies outside the physical range."""
    value = parse(text)
    if value is None and "," in text:  # a decimal comma (70,50) or grouped thousands (1,024)
        value = decimal(text)
    return value if value is not None and in_range(value, gib) else None


def refused(text: str, gib: bool = False) -> bool:
    """True when ``text`` is a number that lies outside the physical range (it is ignored)."""
    value = parse(text)
    return value is not None and not in_range(value, gib)


def gib_or_none(value: float | None) -> float | None:
    """A size in GiB computed from logged numbers, or None when it is outside the range."""
    return value if value is not None and in_range(value, gib=True) else None


def integer(text: str | None) -> int | None:
    """A logged whole number (a pid, a GPU index, an exit code), or None when ``text`` is none or
    lies outside the physical range."""
    value = number(text) if text else None
    return value if isinstance(value, int) else None


#: A size's number as people print it: a decimal point or a decimal comma (``70,50``), thousands
#: grouped by commas (``1,024``), an exponent (``1.6e1``). At most 20 digits a part, so that a
#: run of thousands of digits costs one pass.
SIZE_NUMBER = r"\d{1,20}(?:[.,]\d{1,20}){0,6}(?:[eE][+-]?\d{1,3})?"
#: The units of memory logs print. ``GB``, ``MB``, ``TB``, ``PB`` and ``EB`` are read as the
#: binary units the engines mean by them (SGLang's `avail mem=... GB` is bytes / 2^30; PyTorch and
#: vLLM print GiB); ``KB`` and ``kB`` are 10^3 bytes, as the SI prefix says.
SIZE_UNIT = r"(?:bytes|[KMGTPE]iB|[kK]B|[MGTPE]B|B)"
_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "bytes": 1,
        "B": 1,
        "KiB": 1 << 10,
        "KB": 1000,
        "kB": 1000,
        "MiB": 1 << 20,
        "MB": 1 << 20,
        "GiB": 1 << 30,
        "GB": 1 << 30,
        "TiB": 1 << 40,
        "TB": 1 << 40,
        "PiB": 1 << 50,
        "PB": 1 << 50,
        "EiB": 1 << 60,
        "EB": 1 << 60,
    }
)


def decimal(text: str) -> int | float | None:
    """A number with a decimal comma or thousands commas, as ``parse`` reads the rest:
    ``70,50`` is 70.5, ``1,024`` and ``1,024.5`` are grouped thousands (three digits after each
    comma, the first group not 0), ``1,6e1`` is 16. None for anything else (``1,2,4``: a list)."""
    body = text.strip()
    if "," not in body:
        return parse(body)
    mantissa, _, exponent = body.replace("E", "e").partition("e")
    head = mantissa.split(".")[0]
    groups = head.split(",")
    if (
        len(groups) > 1
        and mantissa.count(".") <= 1
        and not groups[0].startswith("0")
        and 1 <= len(groups[0]) <= 3
        and all(len(g) == 3 for g in groups[1:])
    ):
        return parse(mantissa.replace(",", "") + (f"e{exponent}" if exponent else ""))
    if mantissa.count(",") == 1 and "." not in mantissa:
        return parse(mantissa.replace(",", ".") + (f"e{exponent}" if exponent else ""))
    return None


def to_gib(amount: str, unit: str) -> float | None:
    """``amount`` of ``unit`` (SIZE_NUMBER, SIZE_UNIT) in GiB; None when it is not a number or
    lies outside the physical range."""
    value = decimal(amount)
    factor = _BYTES.get(unit)
    if value is None or factor is None or not in_range(value):
        return None
    return gib_or_none(value * factor / (1 << 30))
