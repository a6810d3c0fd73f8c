"""Actions with computed values, one generator per advice kind named by the rules."""

from __future__ import annotations

from collections.abc import Callable

from oomdoctor.advice import fraction, other
from oomdoctor.advice.context import Context
from oomdoctor.model import Action

Generator = Callable[[Context], list[Action]]

REGISTRY: dict[str, Generator] = {
    "raise_mem_fraction": fraction.raise_fraction,
    "weights_do_not_fit": fraction.weights_do_not_fit,
    "lower_mem_fraction": fraction.lower_fraction,
    "graph_capture": fraction.graph_capture,
    "reserve_encoder": fraction.reserve_encoder,
    "free_gpu": other.free_gpu,
    "kv_slots": other.kv_slots,
    "retraction": other.retraction,
    "host_memory": other.host_memory,
    "gpu_fault": other.gpu_fault,
    "none": lambda ctx: [],
}


def actions(advice: str | None, ctx: Context) -> tuple[Action, ...]:
    """The actions for the winning rule's advice kind."""
    return tuple(REGISTRY[advice or "none"](ctx))


__all__ = ["REGISTRY", "Context", "actions"]
