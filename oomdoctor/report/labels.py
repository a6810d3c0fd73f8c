"""Words shared by the text and Markdown reporters, and the one place that makes log text safe
to show: control characters become visible before any reporter sees them."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

_ROLES = MappingProxyType(
    {"server": "this server", "sibling": "sibling stage", "foreign": "co-tenant"}
)

#: What a terminal acts on instead of showing: C0 controls, DEL, C1 controls (U+0080–U+009F:
#: 0x9B is a one-byte CSI), the bidi embeddings, overrides and isolates that reorder a line
#: (Trojan Source), and the Unicode line and paragraph separators.
#: Those beyond C0 and DEL, which JSON leaves as they are (json_report.py escapes them).
ACTIVE_BEYOND_C0 = "\x80-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f{ACTIVE_BEYOND_C0}]")


def holder_label(p: dict[str, Any]) -> str:
    """``python3 — co-tenant (there before start)`` for one process of the GPU section."""
    # a newline in a process name is shown, and starts no report line
    name = one_line(p["name"]) if p["name"] else "unknown (other PID namespace)"
    role = _ROLES.get(p["role"], p["role"])
    if p["role"] == "foreign" and p.get("present_at_start") is not None:
        role += " (there before start)" if p["present_at_start"] else " (arrived after start)"
    return f"{name} — {role}"


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    if c < 0x20:
        return chr(0x2400 + c)  # its Control Picture: ESC → ␛, CR → ␍, LF → ␊
    if c == 0x7F:
        return "\u2421"  # ␡
    if c <= 0x9F:
        return f"\\x{c:02x}"  # C1 has no pictures
    return f"\\u{c:04x}"


def visible(text: str, keep: str = "\t\n") -> str:
    """``text`` with every control character except those in ``keep`` replaced by a visible
    stand-in (``␛`` for ESC, ``\\x9b`` for a C1 control, ``\\u202e`` for a bidi override).
    Pictures are not controls, so applying it twice changes nothing."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _shown(m), text)


def one_line(text: Any) -> str:
    """``text`` as one visible line: a newline in a value shows as ``␊`` and starts no line."""
    return visible(str(text), keep="\t")


def visible_tree(value: Any) -> Any:
    """A copy of a report dict (or any part of it) with :func:`visible` applied to every
    string in it, keys included: reporters call it first, so no log or process string reaches
    the terminal or the Markdown raw, whichever field it travels in."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_tree(k): visible_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(visible_tree(v) for v in value)
    return value
