"""One registry: advice kind (rules/schema.py ADVICE_KINDS) × engine → the generator of its actions.

`any` serves both engines; an engine's own entry wins. When the log cannot tell SGLang from
vLLM, both engines' actions are given, each labelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from oomdoctor.advice import omni, other, static, vllm_other
from oomdoctor.advice import sglang_fraction as fraction
from oomdoctor.advice import vllm_fraction as vllm
from oomdoctor.advice.context import Context
from oomdoctor.knowledge import family
from oomdoctor.model import Action

Generator = Callable[[Context], list[Action]]


def _nothing(ctx: Context) -> list[Action]:
    return []


REGISTRY: Mapping[str, Mapping[str, Generator]] = MappingProxyType(
    {
        "raise_mem_fraction": {"sglang": fraction.raise_fraction, "vllm": vllm.raise_utilization},
        "weights_do_not_fit": {
            "sglang": fraction.weights_do_not_fit,
            "vllm": vllm_other.weights_do_not_fit,
        },
        "static_footprint": {"sglang": static.sglang, "vllm": static.vllm},
        "lower_mem_fraction": {"sglang": fraction.lower_fraction, "vllm": vllm.lower_utilization},
        "graph_capture": {"sglang": fraction.graph_capture, "vllm": vllm.graph_capture},
        "free_gpu": {"sglang": other.free_gpu, "vllm": vllm_other.free_gpu},
        "reserve_encoder": {"sglang": fraction.reserve_encoder, "vllm": vllm_other.reserve_encoder},
        "kv_slots": {"sglang": other.kv_slots, "vllm": vllm_other.kv_slots},
        "retraction": {"sglang": other.retraction, "vllm": vllm_other.preemption},
        "host_memory": {"any": other.host_memory},
        "gpu_fault": {"any": other.gpu_fault},
        "thinker_kv": {"any": omni.thinker_kv},
        "omni_placement": {"any": omni.placement},
        "remedy": {"any": other.remedy},
        "oversized": {"any": other.oversized},
        "none": {"any": _nothing},
    }
)


def generator(kind: str, engine: str) -> Generator:
    """The generator of ``kind`` for ``engine`` (sglang or vllm)."""
    entry = REGISTRY[kind]
    return entry.get(engine) or entry["any"]


def actions(advice: str | None, ctx: Context) -> tuple[Action, ...]:
    """The actions for the winning rule's advice kind, in the terms of the log's engine.

    When the log cannot tell SGLang from vLLM, both engines' actions are given, each labelled,
    after a line that says so: never one engine's flags for the other's log. The alternatives
    ("Or ...", "If the other process must stay ...") come after the fixes they replace, so fix 1
    is never a fallback and the reports can list them under their own heading."""
    out = _engine_actions(advice, ctx)
    if not out or out[0].alternative:
        return out
    return (*(a for a in out if not a.alternative), *(a for a in out if a.alternative))


def _engine_actions(advice: str | None, ctx: Context) -> tuple[Action, ...]:
    kind = advice or "none"
    too_big = ctx.features.get("oom.exceeds_card_minus_weights") or ctx.features.get(
        "oom.exceeds_card"
    )
    pool = ctx.primary is not None and ctx.primary.site == "kv_pool"
    if too_big is not None and too_big.value and kind in _SIZED_BY_FRACTION and not pool:
        # no fraction fits one allocation larger than the card, unless the fraction sized it: a
        # KV pool is y·pre (vLLM: what u leaves), so a pool larger than the card is the sizing
        kind = "oversized"
    fam = family(ctx.incident.engine)
    if fam == "vllm":
        return _vllm(kind, ctx)
    if fam == "sglang":
        return _sglang(kind, ctx)
    sglang, vllm = _sglang(kind, ctx), _vllm(kind, ctx)
    if [a.text for a in sglang] == [a.text for a in vllm]:
        return sglang  # engine-neutral advice
    if not any(a.flag for a in (*sglang, *vllm)) and not ctx.incident.failures:
        return sglang
    note = Action(
        text="The log does not show whether SGLang or vLLM wrote it, so both engines' flags are "
        "named: use the ones of your server (SGLang sizes its static share with "
        "--mem-fraction-static, vLLM its whole budget with --gpu-memory-utilization)."
    )
    shared = {a.text for a in sglang} & {a.text for a in vllm}
    out = [note, *(a for a in sglang if a.text in shared)]
    for label, group in (("SGLang", sglang), ("vLLM", vllm)):
        out.extend(a._replace(text=f"{label}: {a.text}") for a in group if a.text not in shared)
    return tuple(out)


#: Advice kinds whose first move is a fraction: wrong for an allocation larger than the card.
_SIZED_BY_FRACTION = frozenset(
    {"lower_mem_fraction", "raise_mem_fraction", "reserve_encoder", "graph_capture", "free_gpu"}
)


def _sglang(kind: str, ctx: Context) -> tuple[Action, ...]:
    return tuple(_as_passed(a, ctx) for a in generator(kind, "sglang")(ctx))


def _vllm(kind: str, ctx: Context) -> tuple[Action, ...]:
    return tuple(generator(kind, "vllm")(ctx))


def _as_passed(action: Action, ctx: Context) -> Action:
    """Where SGLang multiplies the flag after reading it (0.3.6/0.4.6 multimodal, AMD aiter),
    the value to pass is the wanted y divided by that factor; say so and carry that value."""
    factor = ctx.sglang.fraction_factor
    flag = action.flag or ""
    if factor == 1.0 or not flag.endswith("mem-fraction-static"):
        return action
    if not isinstance(action.value, float):
        return action
    passed = round(action.value / factor, 3)
    printed = ctx.incident.server_args.get("mem_fraction_static")
    return action._replace(
        text=f"{action.text} Pass {flag} {passed:.3f}: SGLang multiplies the flag by {factor:g} "
        f"({ctx.sglang.fraction_factor_why}), so y in effect is {passed:.3f} × {factor:g} ≈ "
        f"{action.value:.3f}.",
        value=passed,
        current=printed if isinstance(printed, float) else action.current,
    )
