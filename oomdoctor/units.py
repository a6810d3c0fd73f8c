"""How sizes read in reports: GiB for big figures, MiB/KiB for small ones (never "0.00 GiB")."""

from __future__ import annotations


def size(gib: float | None) -> str:
    if gib is None:
        return "unknown"
    magnitude = abs(gib)
    if magnitude >= 1.0 or magnitude == 0.0:
        return f"{gib:.2f} GiB"
    if magnitude * 1024 >= 1.0:
        return f"{gib * 1024:.2f} MiB"
    return f"{gib * 1024 * 1024:.2f} KiB"
