"""The card at a fraction y, in GiB: what other processes and the CUDA context held before
loading, the weights, the KV pool, the dynamic share and what is left free. The report draws it
(report/picture.py); the numbers are computed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.budget.formulas import GIB
from oomdoctor.budget.targets import dynamic_at, kv_pool_at
from oomdoctor.model import SglangBudget

if TYPE_CHECKING:
    from oomdoctor.gpu.view import GpuView

#: Free memory below this is rounding, not a part of the card worth drawing.
MIN_FREE_GIB = 0.05


class Card(NamedTuple):
    y: float
    capacity_gib: float | None
    #: (part, GiB) in card order; a part the log does not give is None, never 0
    parts: tuple[tuple[str, float | None], ...]
    kv_shortfall_gib: float | None  # how far below zero the KV pool is at y


class Surroundings(NamedTuple):
    """What the card holds besides the server, for drawing it."""

    capacity_gib: float | None
    held_gib: float | None  # capacity − pre: the CUDA context and any process there at start
    others_gib: float | None  # the part of that a snapshot attributes to other processes


def surroundings(b: SglangBudget, view: GpuView | None = None) -> Surroundings:
    """The card's size (the OOM message's, else the snapshot's) and what was held at start."""
    capacity = b.capacity_gib
    snapshot = view is not None and view.snapshot is not None
    if capacity is None and view is not None and snapshot:
        dev = view.failing_device or (view.server_devices[0] if view.server_devices else None)
        capacity = dev.total_bytes / GIB if dev is not None and dev.total_bytes else None
    held = capacity - b.pre_gib if capacity is not None and b.pre_gib is not None else None
    others = None  # co-tenants there at start, when the snapshot names them
    if view is not None and snapshot:
        others = sum(h.gib or 0.0 for h in view.foreign if h.present_at_start) or None
    return Surroundings(capacity, held, others)


def card_at(b: SglangBudget, y: float | None, around: Surroundings) -> Card | None:
    """The card at fraction y (None when the log lacks pre, post or the weights)."""
    if y is None or b.pre_gib is None or b.post_gib is None or b.weights_gib is None:
        return None
    kv = kv_pool_at(b, y)
    assert kv is not None
    held, others, capacity = around.held_gib, around.others_gib, around.capacity_gib
    parts: dict[str, float | None] = {}
    if others is not None and held is not None:
        parts["other"] = min(others, held)
        parts["held"] = max(held - others, 0.0)
    else:
        parts["held"] = held
    parts["weights"] = b.weights_gib
    parts["kv"] = max(kv, 0.0)
    if kv >= 0:
        parts["dynamic"] = dynamic_at(y, b.pre_gib)
    else:  # no pool: what the weights leave (post) is all there is, less than the dynamic share
        parts["left"] = max(b.post_gib, 0.0)
    if capacity is not None and held is not None:
        free = capacity - sum(v for v in parts.values() if v is not None)
        if free > MIN_FREE_GIB:
            parts["free"] = free
    return Card(y, capacity, tuple(parts.items()), -kv if kv < 0 else None)
