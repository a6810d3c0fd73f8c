"""The report's `budget` object (DESIGN §5): one shape for both engines, every key always
present (null when unknown), the same for `diagnose` and `plan`."""

from __future__ import annotations

from typing import Any

from oomdoctor.judge.holders import TOP
from oomdoctor.model import Budget, SglangBudget, VllmBudget, Window


def _r(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


#: The object's keys, in the order the JSON contract prints them.
_ORDER = (
    "engine",
    "rank",
    "stage",
    "gpu",
    "pre_gib",
    "post_gib",
    "weights_gib",
    "mem_fraction_static",
    "mem_fraction_source",
    "fraction_factor",
    "static_gib",
    "dynamic_gib",
    "kv_gib",
    "kv_logged_gib",
    "kv_tokens",
    "bytes_per_token",
    "context_len",
    "graph_gib",
    "headroom_gib",
    "capacity_gib",
    "y_zero",
    "y_min",
    "y_min_basis",
    "y_max",
    "y_max_basis",
    "reserve_gib",
    "gpu_memory_utilization",
    "utilization_source",
    "budget_gib",
    "activation_gib",
    "non_torch_gib",
    "max_model_len",
    "kv_needed_gib",
    "u_min",
    "u_min_basis",
    "u_max",
    "u_max_basis",
    "window_empty",
    "ranks",
)


def budget_dict(b: Budget) -> dict[str, Any]:
    """One object for both engines (DESIGN §5): vLLM fills its own keys and leaves the SGLang
    ones (pre/post/y) null, and the other way round."""
    shared = {
        "engine": b.engine,
        "weights_gib": _r(b.weights_gib),
        "kv_gib": _r(b.kv_gib),
        "kv_tokens": b.kv_tokens,
        "bytes_per_token": b.bytes_per_token,
        "graph_gib": _r(b.graph_gib),
        "capacity_gib": _r(b.capacity_gib),
        "window_empty": b.window.empty,
    }
    own = _sglang_part(b) if isinstance(b, SglangBudget) else _vllm_part(b)
    out = {**dict.fromkeys(_ORDER), "fraction_factor": 1.0, "ranks": [], **shared, **own}
    result = {key: out[key] for key in _ORDER}
    if (
        isinstance(b, SglangBudget) and len(b.ranks) > TOP
    ):  # the tightest rank and the first others; the rest counted
        ranks = result["ranks"]
        kept = [r for r in ranks if r["rank"] == b.rank][:1]
        kept += [r for r in ranks if r not in kept][: TOP - len(kept)]
        result["ranks"] = [r for r in ranks if r in kept]
        result["ranks_more"] = {"count": len(ranks) - len(kept)}
    return result


def _window(w: Window, name: str) -> dict[str, Any]:
    return {
        f"{name}_min": _r(w.low, 4),
        f"{name}_min_basis": w.low_basis,
        f"{name}_max": _r(w.high, 4),
        f"{name}_max_basis": w.high_basis,
    }


def _sglang_part(b: SglangBudget) -> dict[str, Any]:
    return {
        "rank": b.rank,
        "stage": b.stage,
        "gpu": b.gpu,
        "pre_gib": _r(b.pre_gib),
        "post_gib": _r(b.post_gib),
        "mem_fraction_static": b.mem_fraction_static,
        "mem_fraction_source": b.mem_fraction_source,
        "fraction_factor": b.fraction_factor,
        "static_gib": _r(b.static_gib),
        "dynamic_gib": _r(b.dynamic_gib),
        "kv_logged_gib": _r(b.kv_logged_gib),
        "context_len": b.context_len,
        "headroom_gib": _r(b.headroom_gib),
        "y_zero": _r(b.y_zero, 4),
        **_window(b.window, "y"),
        "reserve_gib": _r(b.reserve_gib),
        "ranks": [
            {
                "rank": r.rank,
                "stage": r.stage,
                "gpu": r.gpu,
                "mem_fraction_static": r.mem_fraction_static,
                "pre_gib": _r(r.pre_gib),
                "post_gib": _r(r.post_gib),
                "weights_gib": _r(r.weights_gib),
                "kv_gib": _r(r.kv_gib),
                "kv_logged_gib": _r(r.kv_logged_gib),
            }
            for r in b.ranks
        ],
    }


def _vllm_part(b: VllmBudget) -> dict[str, Any]:
    return {
        "gpu_memory_utilization": b.gpu_memory_utilization,
        "utilization_source": b.utilization_source,
        "budget_gib": _r(b.budget_gib),
        "activation_gib": _r(b.activation_gib),
        "non_torch_gib": _r(b.non_torch_gib),
        "max_model_len": b.max_model_len,
        "context_len": b.max_model_len,  # the context a request may use
        "kv_needed_gib": _r(b.kv_needed_gib),
        **_window(b.window, "u"),
    }
