"""The formulas of DESIGN §2, and the rounding every advised value goes through.

    static  = y·pre                       (weights + KV pool)
    dynamic = (1 − y)·pre                 (activations, CUDA graphs, workspaces, encoders)
    KV      = post − (1 − y)·pre          KV(y') = KV(y) + (y' − y)·pre

All figures are GiB (SGLang's "GB" is GiB).
"""

from __future__ import annotations

import math

GIB = float(1 << 30)


#: What a rank holds before its weights load (CUDA context, cuBLAS, NCCL): on an otherwise empty
#: card, pre is this far below memory.total (1.1–1.6 GiB on H100s). No log line measures it
#: (0.4.6–0.5.2's "Init torch distributed ends. mem usage" is only the NCCL part).
CONTEXT_OVERHEAD_GIB = 1.35


def kv_at(y: float, pre: float, post: float) -> float:
    """KV pool size at fraction y."""
    return post - (1.0 - y) * pre


def y_for_kv(kv: float, pre: float, post: float) -> float:
    """The fraction that yields a KV pool of ``kv`` GiB (inverse of kv_at)."""
    return 1.0 - (post - kv) / pre


def round_up(y: float, step: float = 0.01) -> float:
    return round(math.ceil(round(y / step, 6)) * step, 4)


def round_down(y: float, step: float = 0.01) -> float:
    return round(math.floor(round(y / step, 6)) * step, 4)


def snap_bytes_per_token(kv_gib: float, tokens: int, printed_error_gib: float = 0.01) -> int:
    """Bytes per token from a logged pool size printed with two decimals.

    The sizes are rounded, so the quotient is only known within an interval; real cell sizes are
    products of heads × head_dim × layers × dtype bytes, so the value in that interval divisible
    by the highest power of two is the one SGLang used.
    """
    central = kv_gib * GIB / tokens
    ends = (
        (kv_gib - printed_error_gib) * GIB / tokens,
        (kv_gib + printed_error_gib) * GIB / tokens,
    )
    return snap_between(min(ends), max(ends), central)


def snap_between(low: float, high: float, central: float) -> int:
    """The value in [low, high] divisible by the highest power of two (else ``central``)."""
    for power in range(20, 3, -1):
        step = 1 << power
        candidate = round(central / step) * step
        if low <= candidate <= high and candidate > 0:
            return int(candidate)
    return round(central)


def runtime_spare(headroom_gib: float) -> float:
    """How much of the post-startup headroom to keep free when growing into it: at least 2 GiB,
    and half of it, because the startup figure was taken before any request ran."""
    return max(2.0, headroom_gib / 2)


def omni_stage_kv(total: float, fraction: float, used: float) -> float:
    """SGLang Omni's KV pool for a stage with a budget of its own (sglang-logs.md §6.2):
    int(total × the stage's fraction) − what the stage process already holds."""
    return int(total * GIB * fraction) / GIB - used
