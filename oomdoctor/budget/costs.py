"""What other holders of the card cost the server, in GiB and in fraction.

A holder present from the start only shrank ``pre``: at fraction y it cost the KV pool y × its
size and the dynamic share (1 − y) × its size. One that grew after start took its whole size
from memory the server had counted on. These judgements read the budget; they never look at the
snapshot or the log themselves (gpu/cotenants.py and rules/features.py hand them the numbers).
"""

from __future__ import annotations

from collections.abc import Iterable

from oomdoctor.budget.formulas import CONTEXT_OVERHEAD_GIB
from oomdoctor.model import Budget, Failure, SglangBudget

#: Foreign memory below this explains nothing (allocator noise, a peer's context).
MIN_FOREIGN_GIB = 1.0
#: Without the failed allocation's numbers, a holder this large is taken to explain the failure.
UNSIZED_FOREIGN_GIB = 2.0
#: A start gap (capacity − pre − context) smaller than this is the card's own overhead.
MIN_START_GAP_GIB = 3.0
#: How close a nameless process's size must be to the server's expected size to be the server.
SERVER_MATCH_GIB = 2.0
SERVER_MATCH_SHARE = 0.05


def _y(budget: Budget) -> float | None:
    return budget.mem_fraction_static if isinstance(budget, SglangBudget) else None


def _pre(budget: Budget) -> float | None:
    return budget.pre_gib if isinstance(budget, SglangBudget) else None


def expected_server_gib(budget: Budget, message_self_gib: float | None) -> float | None:
    """What the server's own process should hold on its GPU, to recognise it without a name:
    the OOM message's own figure, else weights + KV pool + graphs + CUDA context."""
    if message_self_gib is not None:
        return message_self_gib
    if budget.weights_gib is None:
        return None
    logged = budget.kv_logged_gib if isinstance(budget, SglangBudget) else None
    kv = logged if logged is not None else max(budget.kv_gib or 0.0, 0.0)
    return budget.weights_gib + kv + (budget.graph_gib or 0.0) + CONTEXT_OVERHEAD_GIB


def matches_server(gib: float | None, expected: float | None) -> bool:
    """A process whose size is the server's expected size, within 2 GiB or 5%."""
    if gib is None or expected is None:
        return False
    return abs(gib - expected) <= max(SERVER_MATCH_GIB, SERVER_MATCH_SHARE * expected)


def present_at_start(
    device_total_gib: float | None, gib: float | None, budget: Budget
) -> bool | None:
    """True when capacity − pre − context overhead accounts for the holder (it shrank pre)."""
    pre = _pre(budget)
    if device_total_gib is None or gib is None or pre is None:
        return None
    return device_total_gib - pre - CONTEXT_OVERHEAD_GIB >= 0.8 * gib


def kv_cost(gib: float | None, budget: Budget) -> float | None:
    """What a holder present at start cost the KV pool: y × its size."""
    y = _y(budget)
    return y * gib if y is not None and gib is not None else None


def start_gap(capacity_gib: float | None, budget: Budget) -> float | None:
    """Memory held by others when the server started: capacity − pre − context overhead."""
    pre = _pre(budget)
    if capacity_gib is None or pre is None:
        return None
    return capacity_gib - pre - CONTEXT_OVERHEAD_GIB


def start_gap_explains(gap: float | None, budget: Budget) -> bool:
    """That memory, at y, would have covered the missing KV pool (y × gap ≥ −KV)."""
    y, kv = _y(budget), budget.kv_gib
    return (
        gap is not None
        and gap >= MIN_START_GAP_GIB
        and y is not None
        and kv is not None
        and kv < 0
        and y * gap >= -kv
    )


def message_foreign_explains(
    foreign: float, shortfall: float | None, budget: Budget, total: float | None
) -> bool:
    """Would the allocation have fit without the foreign holders the OOM message lists?

    Present from the start (total − pre covers them), they cost the dynamic share (1 − y) of
    their size; otherwise all of it.
    """
    if foreign < MIN_FOREIGN_GIB:
        return False
    if shortfall is None:
        return True
    pre, y = _pre(budget), _y(budget)
    at_start = pre is not None and total is not None and total - pre - 0.5 >= 0.8 * foreign
    if at_start and y is not None:
        return (1.0 - y) * foreign >= shortfall
    return foreign >= shortfall


def snapshot_foreign_explains(
    foreign: Iterable[tuple[float, bool | None]], budget: Budget, primary: Failure | None
) -> bool:
    """Would the failure have been avoided without the co-tenants a snapshot shows?

    ``foreign`` is (GiB, present at start) of each co-tenant on the failing GPU.
    """
    holders = list(foreign)
    total = sum(gib for gib, _ in holders)
    if total < MIN_FOREIGN_GIB or primary is None:
        return False
    y = _y(budget)
    if primary.kind in ("startup_kv_error", "negative_profile"):
        if budget.kv_gib is None or y is None:
            return total >= UNSIZED_FOREIGN_GIB
        return y * total >= -budget.kv_gib
    if primary.kind == "tp_imbalance":
        return True
    oom = primary.oom
    if oom is None or oom.requested_gib is None or oom.free_gib is None:
        return total >= UNSIZED_FOREIGN_GIB
    short = max(oom.requested_gib - oom.free_gib, 0.0)
    effective = sum(
        (1.0 - y) * gib if at_start and y is not None else gib for gib, at_start in holders
    )
    return effective >= short
