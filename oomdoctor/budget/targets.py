"""The values advice proposes, and what they give: every fraction the advice modules name is
computed here from the budget (formulas.py) and the failure's numbers; advice only words them.

SGLang's fraction y is a share of the memory free before loading (pre); vLLM's u a share of the
GPU's total. A move of Δy gives or takes Δy·pre of KV pool; a move of Δu, Δu·total of KV cache.
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.budget.formulas import GIB, kv_at, round_down, round_up, runtime_spare
from oomdoctor.model import SglangBudget, VllmBudget

#: The dynamic share is planned with this much room beyond the failed allocation: the OOM shows
#: only the last allocation of a peak; more of similar size usually follow it in the same forward,
#: and the caching allocator rounds and fragments. 10% of the dynamic share, at least 1 GiB.
MARGIN_SHARE = 0.10
MARGIN_MIN_GIB = 1.0
#: A raised fraction is placed this far above the smallest workable value.
RAISE_MARGIN = 0.02
#: Below this dynamic share a server cannot run at all (graphs, NCCL, cuBLAS, a single batch).
HARD_DYNAMIC_FLOOR_GIB = 2.0
#: SGLang budgets this many MiB of activations per prefill token.
PREFILL_MIB_PER_TOKEN = 1.5
#: Growing the pool into the headroom moves y by at most this much.
MAX_GROW_STEP = 0.10
#: Without a measured shortfall, lower the fraction one step of this size.
BLIND_STEP = 0.05
#: vLLM: the largest u worth suggesting (vLLM itself needs the CUDA context outside its budget).
U_CEILING = 0.98
#: vLLM: room kept beyond a measured shortfall when lowering u.
U_MARGIN_GIB = 1.0
#: vLLM: the step for CUDA-graph room when nothing measures it.
GRAPH_STEP = 0.03
#: vLLM rounds --max-model-len suggestions down to this many tokens.
MODEL_LEN_STEP = 256


# -- shared -----------------------------------------------------------------------------------


def tokens_in(kv_gib: float, bytes_per_token: int) -> int:
    """How many tokens a KV pool of ``kv_gib`` holds (none at a logged 0 bytes per token)."""
    return int(kv_gib * GIB // bytes_per_token) if bytes_per_token > 0 else 0


def kv_for_tokens(tokens: int, bytes_per_token: int) -> float:
    """GiB of KV pool that ``tokens`` tokens take."""
    return tokens * bytes_per_token / GIB


def runtime_margin(dynamic_gib: float | None) -> float:
    """Room planned beyond a failed allocation: max(1 GiB, 10% of the dynamic share)."""
    return max(MARGIN_MIN_GIB, MARGIN_SHARE * (dynamic_gib or 0.0))


def chunk_saving_gib(chunk: int, new: int) -> float:
    """What a smaller --chunked-prefill-size takes off the runtime peak (1.5 MiB per token)."""
    return PREFILL_MIB_PER_TOKEN * (chunk - new) / 1024


# -- SGLang: y ------------------------------------------------------------------------------


class Move(NamedTuple):
    """A fraction to set and what the card looks like there (GiB)."""

    value: float
    kv_gib: float | None  # the KV pool at that value
    dynamic_gib: float | None  # what is left for activations (SGLang: (1 − y)·pre)


def dynamic_at(y: float, pre: float) -> float:
    return (1 - y) * pre


def kv_pool_at(b: SglangBudget, y: float) -> float | None:
    """The KV pool at y, less what 0.5.23 sets aside for multimodal buffers."""
    if b.pre_gib is None or b.post_gib is None:
        return None
    return kv_at(y, b.pre_gib, b.post_gib) - b.kv_reserve_gib


def raise_again(rec: float, high: float | None) -> tuple[float, float]:
    """The log's y should already leave a pool: a further step, inside the window (as shown,
    and rounded up to a value to pass)."""
    step = min(rec + 0.03, high or 0.99)
    return step, round_up(step)


def start_past_window(b: SglangBudget, y_min: float, suggested: float | None) -> Move:
    """The window is empty: the smallest y that starts (just above y_min)."""
    assert b.pre_gib is not None
    rec = round_up(max(y_min + 0.01, (suggested or 0.0) + 0.005))
    return Move(rec, kv_pool_at(b, rec), dynamic_at(rec, b.pre_gib))


def dynamic_floor(b: SglangBudget) -> float:
    """The least dynamic share a server can run on (graphs, NCCL, a single batch)."""
    pre = b.pre_gib or 0.0
    return max(HARD_DYNAMIC_FLOOR_GIB, 0.03 * pre, (b.graph_gib or 0.0) + 1.0)


class Lower(NamedTuple):
    """Lowering y by what the failed allocation proves is missing."""

    value: float | None  # None: no fraction both starts and runs (the KV floor stops it)
    need_gib: float | None  # shortfall + margin (None: no allocation size: one BLIND_STEP)
    capped_from: float | None  # the value the shortfall alone allowed, above the window
    floor: float | None  # the KV floor that stopped it (y_min, else y_zero)
    floor_stopped: bool  # the value was raised to the floor (a lever must do the rest)
    kv_gib: float | None
    dynamic_gib: float | None  # at the value
    dynamic_now_gib: float  # at today's y


def lower_y(b: SglangBudget, shortfall: float | None, margin: float) -> Lower:
    """Needs y and pre."""
    y, pre = b.mem_fraction_static, b.pre_gib
    assert y is not None and pre is not None
    need = None if shortfall is None else shortfall + margin
    blind = need is None or pre <= 0  # a logged pre of 0: no share to take the need from
    rec = round_down(y - BLIND_STEP) if blind else round_down(y - need / pre)  # type: ignore[operator]
    capped = None
    if b.window.high is not None and rec > b.window.high:
        # The failed allocation alone allows more, but the runtime reserve SGLang plans for this
        # card (the window's upper bound) does not: stay inside the window.
        capped, rec = rec, round_down(b.window.high)
    floor = b.window.low if b.window.low is not None else b.y_zero
    stopped = False
    if floor is not None and rec < floor:
        ok_floor = round_up(floor)
        if ok_floor >= y:
            return Lower(None, need, capped, floor, False, None, None, dynamic_at(y, pre))
        rec, stopped = ok_floor, True
    return Lower(
        rec,
        need,
        capped,
        floor,
        stopped,
        kv_pool_at(b, rec),
        dynamic_at(rec, pre),
        dynamic_at(y, pre),
    )


class Grow(NamedTuple):
    step: float  # Δy
    gained_gib: float  # Δy·pre more KV pool
    spare_gib: float  # headroom kept free


def grow_into_headroom(b: SglangBudget) -> Grow | None:
    """Raise y into the headroom left after startup, keeping a spare part of it free."""
    if b.headroom_gib is None or not b.pre_gib or b.mem_fraction_static is None:
        return None
    spare = runtime_spare(b.headroom_gib)
    dy = round_down(min(MAX_GROW_STEP, (b.headroom_gib - spare) / b.pre_gib))
    if dy < 0.01:
        return None
    return Grow(dy, dy * b.pre_gib, spare)


def lower_stage_y(y: float, pre: float, shortfall: float) -> float:
    """An Omni sibling stage's own y, lowered by the shortfall plus MARGIN_MIN_GIB."""
    if pre <= 0:
        return round_down(y - BLIND_STEP)
    return round_down(y - (shortfall + MARGIN_MIN_GIB) / pre)


def thinker_budget_for(stage: float, need_gib: float, capacity_gib: float) -> float:
    """Omni: the thinker's stage budget (a share of the card) that adds ``need_gib`` of pool."""
    share = need_gib / capacity_gib if capacity_gib > 0 else BLIND_STEP
    return round_up(stage + share + 0.01)


def thinker_y_for(y: float, need_gib: float, pre: float) -> float:
    """Omni: the thinker's y that adds ``need_gib`` of pool."""
    share = need_gib / pre if pre > 0 else BLIND_STEP
    return round_up(y + share + 0.01)


def colocated_budget_floor(total: float, used: float) -> tuple[float, float]:
    """Omni: the stage budget below which no pool is left (used / total), and the value that
    leaves at least 2 GiB (or 0.02 of the card) above it."""
    if total <= 0:
        return 1.0, 1.0  # a card of no memory (a misprint): no budget leaves a pool
    floor = used / total
    return floor, round_up(floor + max(2.0 / total, 0.02))


# -- vLLM: u ---------------------------------------------------------------------------------


def raise_u(b: VllmBudget) -> Move:
    """A little above u_min, at most U_CEILING and u_max. Needs u, total, KV and u_min."""
    u, total, kv, low, high = (
        b.gpu_memory_utilization,
        b.capacity_gib,
        b.kv_gib,
        b.window.low,
        b.window.high,
    )
    assert u is not None and total and kv is not None and low is not None
    target = min(round_up(low + RAISE_MARGIN), U_CEILING)
    if high is not None:
        target = min(target, max(high, low))
    return Move(target, kv + (target - u) * total, None)


def card_for_gap(missing_gib: float, u_now: float) -> float:
    """The card size on which raising u to U_CEILING adds ``missing_gib`` of KV cache."""
    return missing_gib / (U_CEILING - u_now) if u_now < U_CEILING else float("inf")


def lower_u(b: VllmBudget) -> tuple[float, float, float | None] | None:
    """u lowered to u_max: (target, GiB freed outside the budget, KV cache after)."""
    u, total, high = b.gpu_memory_utilization, b.capacity_gib, b.window.high
    if u is None or not total or high is None or high >= u:
        return None
    freed = (u - high) * total
    return high, freed, (b.kv_gib - freed) if b.kv_gib is not None else None


def fit_startup_check(free: float, total: float) -> float:
    """The largest u whose total × u passes vLLM's start-up check against the free memory."""
    return round_down(free / total) if total > 0 else 0.0


def model_len_fits(b: VllmBudget) -> int | None:
    """The longest --max-model-len this KV cache holds, in steps of MODEL_LEN_STEP tokens."""
    if not (b.kv_gib and b.kv_gib > 0 and b.bytes_per_token):
        return None
    return int(b.kv_gib * GIB / b.bytes_per_token) // MODEL_LEN_STEP * MODEL_LEN_STEP


def graph_room_u(u: float) -> float:
    """u one GRAPH_STEP lower: room for CUDA graphs when nothing measures them."""
    return round_down(u - GRAPH_STEP)
