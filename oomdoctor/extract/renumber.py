"""Give an assembled incident's lines the numbers the user sees.

Where the reader rewrote the input (joined wrapped records, unpacked JSON, put a newest-first
export in order), lines are numbered in reading order while the incident is assembled (every
"the next line" there means the next record), then given their physical line numbers here,
from the map the reader kept for the lines that were fed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.model import Line

T = TypeVar("T")
#: `line 12` in a sentence written while the incident was assembled (why an engine was told).
_LINE_WORD = LazyPattern(r"\bline (\d+)\b")
_TEXT_FIELDS = ("engine_why",)


def renumber(incident: T, numbers: Mapping[tuple[int, int], int]) -> T:
    """``incident`` with every Line whose (source, number) is in ``numbers`` renumbered."""
    if not numbers:
        return incident
    memo: dict[int, Any] = {}
    out = _walk(incident, numbers, memo)
    fields = getattr(out, "_fields", ())
    changes = {}
    for name in _TEXT_FIELDS:
        text = getattr(out, name, None) if name in fields else None
        if isinstance(text, str):
            changes[name] = _LINE_WORD.sub(lambda m: _word(m, numbers), text)
    return out._replace(**changes) if changes else out  # type: ignore[no-any-return]


def _word(m: Any, numbers: Mapping[tuple[int, int], int]) -> str:
    found = {v for (_, n), v in numbers.items() if n == int(m.group(1))}
    return f"line {found.pop()}" if len(found) == 1 else str(m.group(0))


def _walk(obj: Any, numbers: Mapping[tuple[int, int], int], memo: dict[int, Any]) -> Any:
    if obj is None or isinstance(obj, str | int | float | bool | bytes):
        return obj
    key = id(obj)
    if key in memo:
        return memo[key]
    out = obj
    if isinstance(obj, Line):
        physical = numbers.get((obj.source, obj.number))
        out = obj if physical is None else obj._replace(number=physical)
    elif isinstance(obj, tuple):
        items = [_walk(v, numbers, memo) for v in obj]
        if any(a is not b for a, b in zip(items, obj, strict=True)):
            out = type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    elif isinstance(obj, list):
        out = [_walk(v, numbers, memo) for v in obj]
    elif isinstance(obj, Mapping):
        pairs = {k: _walk(v, numbers, memo) for k, v in obj.items()}
        if any(pairs[k] is not v for k, v in obj.items()):
            out = MappingProxyType(pairs) if isinstance(obj, MappingProxyType) else pairs
    memo[key] = out
    return out
