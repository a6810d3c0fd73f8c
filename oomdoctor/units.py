"""How sizes read in reports (GiB for big figures, MiB/KiB for small ones, never "0.00 GiB"), and
the physical range a logged number must lie in to be believed.

Every number a log prints passes through ``number`` (or ``in_range``) where it is parsed, so no
later stage divides by, converts or allocates from an infinity, a NaN or a 400-digit integer.
"""

from __future__ import annotations

import math

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
