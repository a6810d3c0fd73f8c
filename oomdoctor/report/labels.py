"""Words shared by the text and Markdown reporters."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

_ROLES = MappingProxyType(
    {"server": "this server", "sibling": "sibling stage", "foreign": "co-tenant"}
)


def holder_label(p: dict[str, Any]) -> str:
    """``python3 — co-tenant (there before start)`` for one process of the GPU section."""
    name = p["name"] or "unknown (other PID namespace)"
    role = _ROLES.get(p["role"], p["role"])
    if p["role"] == "foreign" and p.get("present_at_start") is not None:
        role += " (there before start)" if p["present_at_start"] else " (arrived after start)"
    return f"{name} — {role}"
