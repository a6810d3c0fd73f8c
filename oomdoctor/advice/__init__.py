"""Actions with computed values, one generator per advice kind named by the rules."""

from __future__ import annotations

from collections.abc import Callable

from oomdoctor.advice import fraction, omni, other
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
    "thinker_kv": omni.thinker_kv,
    "omni_placement": omni.placement,
    "none": lambda ctx: [],
}


def actions(advice: str | None, ctx: Context) -> tuple[Action, ...]:
    """The actions for the winning rule's advice kind, in the terms of the log's engine."""
    kind = advice or "none"
    if ctx.incident.engine == "vllm":
        from oomdoctor.advice import vllm

        generator = vllm.REGISTRY.get(kind)
        if generator is not None:
            return tuple(generator(ctx))
    return tuple(_as_passed(a, ctx) for a in REGISTRY[kind](ctx))


def _as_passed(action: Action, ctx: Context) -> Action:
    """Where SGLang multiplies the flag after reading it (0.3.6/0.4.6 multimodal, AMD aiter),
    the value to pass is the wanted y divided by that factor; say so and carry that value."""
    factor = ctx.budget.fraction_factor
    flag = action.flag or ""
    if factor == 1.0 or not flag.endswith("mem-fraction-static"):
        return action
    if not isinstance(action.value, float):
        return action
    passed = round(action.value / factor, 3)
    printed = ctx.incident.server_args.get("mem_fraction_static")
    return action._replace(
        text=f"{action.text} Pass {flag} {passed:.3f}: SGLang multiplies the flag by {factor:g} "
        f"({ctx.budget.fraction_factor_why}), so y in effect is {passed:.3f} × {factor:g} ≈ "
        f"{action.value:.3f}.",
        value=passed,
        current=printed if isinstance(printed, float) else action.current,
    )


__all__ = ["REGISTRY", "Context", "actions"]
