"""`oomdoctor plan`: the budget of DESIGN §2 before a launch, from the card and the model.

It produces the same SglangBudget that `diagnose` rebuilds from a log (one JSON object for both), plus
what a launch needs to know: tokens, concurrency at the context length, a verdict, and a command.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from oomdoctor.budget import sglang_defaults
from oomdoctor.budget.formulas import CONTEXT_OVERHEAD_GIB, GIB, kv_at, round_down, round_up
from oomdoctor.budget.model_config import ModelShape
from oomdoctor.incident.versions import key
from oomdoctor.model import Scalar, SglangBudget, Window

#: NCCL adds a little to the context overhead with tensor or pipeline parallelism.
NCCL_GIB = 0.3
CONTEXT_GIB = CONTEXT_OVERHEAD_GIB


@dataclass(frozen=True)
class PlanInput:
    card_mib: float | None = None
    card_name: str | None = None
    pre_gib: float | None = None  # free memory before weights, when the user knows it
    weights_gib: float | None = None  # per GPU
    bytes_per_token: int | None = None
    model: ModelShape | None = None
    model_path: str | None = None
    tp: int = 1
    pp: int = 1
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    mem_fraction_static: float | None = None
    sglang_version: str = "0.5.23"


@dataclass(frozen=True)
class Plan:
    inputs: PlanInput
    budget: SglangBudget
    verdict: str  # "will_not_start", "thin_headroom", "context_does_not_fit", "fine"
    summary: str
    concurrency: float | None
    recommended: float | None
    command: str
    notes: tuple[str, ...] = field(default_factory=tuple)


def _args(p: PlanInput) -> dict[str, Scalar]:
    args: dict[str, Scalar] = {"tp_size": p.tp, "pp_size": p.pp}
    if p.chunked_prefill_size is not None:
        args["chunked_prefill_size"] = p.chunked_prefill_size
    if p.cuda_graph_max_bs is not None:
        args["cuda_graph_max_bs"] = p.cuda_graph_max_bs
    if p.model is not None and p.model.mla_dims is not None:
        args["model_path"] = "deepseek"  # the MLA branch of SGLang's graph reserve
    return args


def make(p: PlanInput) -> Plan:
    """Compute the plan; raises ValueError when the inputs cannot give a budget."""
    notes: list[str] = []
    era = sglang_defaults.era_of(p.sglang_version, p.sglang_version)
    if p.pre_gib is not None:
        pre = p.pre_gib
        pre_note = "given"
    elif p.card_mib is not None:
        overhead = CONTEXT_GIB + (NCCL_GIB if p.tp * p.pp > 1 else 0.0)
        pre = p.card_mib / 1024 - overhead
        pre_note = f"estimated: memory.total {p.card_mib / 1024:.2f} GiB − {overhead:.2f} GiB of CUDA context"
        notes.append(f"pre is {pre_note}; give --pre-load-memory when a log shows the real value")
    else:
        raise ValueError("give the card (--gpu NAME or --gpu-mem SIZE) or --pre-load-memory")
    card_mib = p.card_mib if p.card_mib is not None else (pre + CONTEXT_GIB) * 1024
    if p.card_mib is None:
        notes.append(
            f"the card is not given: its memory is taken as pre + {CONTEXT_GIB:.2f} GiB of context "
            "(give --gpu or --gpu-mem for SGLang's default fraction and reserve of a real card)"
        )

    weights = p.weights_gib
    if weights is None and p.model is not None:
        weights = p.model.weights_gib_per_gpu(p.tp, p.pp)
        notes.append(f"weights {weights:.2f} GiB per GPU, from the {p.model.weights_from}")
    if weights is None:
        raise ValueError("give the model (--model DIR|config.json) or --weights SIZE")
    bpt = p.bytes_per_token
    if bpt is None and p.model is not None:
        bpt = p.model.bytes_per_token(p.tp, p.kv_cache_dtype)
    context = p.context_length or (p.model.max_context if p.model is not None else None)

    args = _args(p)
    y = p.mem_fraction_static
    y_source = "given"
    if y is None:
        y = sglang_defaults.default_fraction(card_mib, args, era)
        y_source = f"SGLang {era} default for a {card_mib:.0f} MiB card"
    post = pre - weights
    kv = kv_at(y, pre, post)
    tokens = int(kv * GIB // bpt) if bpt and kv > 0 else None
    reserve = sglang_defaults.reserve(card_mib, args, era)
    y_zero = 1 - post / pre
    need = context * bpt / GIB if context and bpt else 0.0
    y_min = y_zero + need / pre
    y_max = 1 - reserve.gib / pre
    budget = SglangBudget(
        pre_gib=pre,
        post_gib=post,
        weights_gib=weights,
        mem_fraction_static=y,
        mem_fraction_source=y_source,
        static_gib=y * pre,
        dynamic_gib=(1 - y) * pre,
        kv_gib=kv,
        kv_tokens=tokens,
        bytes_per_token=bpt,
        context_len=context,
        capacity_gib=card_mib / 1024,
        y_zero=y_zero,
        window=Window(
            y_min,
            (
                f"a KV pool for one request of the context length: {context} tokens × {bpt} B = "
                f"{need:.2f} GiB"
                if need
                else "a KV pool that is not empty"
            ),
            y_max,
            f"a runtime reserve of {reserve.gib:.2f} GiB ({reserve.basis})",
        ),
        reserve_gib=reserve.gib,
    )
    concurrency = tokens / context if tokens and context else None
    verdict, summary = _verdict(budget, tokens, context)
    recommended = _recommend(budget) if verdict != "fine" else None
    return Plan(
        inputs=p,
        budget=budget,
        verdict=verdict,
        summary=summary,
        concurrency=concurrency,
        recommended=recommended,
        command=_command(p, recommended if recommended is not None else y, context),
        notes=tuple(notes),
    )


def _verdict(b: SglangBudget, tokens: int | None, context: int | None) -> tuple[str, str]:
    assert b.kv_gib is not None and b.dynamic_gib is not None and b.mem_fraction_static is not None
    y = b.mem_fraction_static
    if b.kv_gib <= 0:
        return "will_not_start", (
            f"Will not start: at --mem-fraction-static {y:.3f} the static share "
            f"{b.static_gib or 0:.2f} GiB does not cover the weights ({b.weights_gib or 0:.2f} GiB); "
            f"the KV pool would be {b.kv_gib:.2f} GiB."
        )
    if b.reserve_gib is not None and b.dynamic_gib < b.reserve_gib:
        return "thin_headroom", (
            f"Starts, but activation headroom is thin: {b.dynamic_gib:.2f} GiB left for activations "
            f"and CUDA graphs, less than the {b.reserve_gib:.2f} GiB SGLang would reserve."
        )
    if tokens is not None and context is not None and tokens < context:
        return "context_does_not_fit", (
            f"Starts, but one request of the full context ({context} tokens) does not fit in the "
            f"{tokens}-token KV pool."
        )
    return "fine", f"Fine: {b.kv_gib:.2f} GiB of KV" + (
        f" ({tokens:,} tokens)" if tokens else ""
    ) + "."


def _recommend(b: SglangBudget) -> float | None:
    low, high = b.window.low, b.window.high
    if low is None or high is None or b.window.empty:
        return None
    return max(round_up(low + 0.01), min(round((low + high) / 2, 2), round_down(high)))


def _command(p: PlanInput, y: float, context: int | None) -> str:
    parts = ["python -m sglang.launch_server", f"--model-path {p.model_path or 'MODEL'}"]
    if p.tp > 1:
        parts.append(f"--tp-size {p.tp}")
    if p.pp > 1:
        parts.append(f"--pp-size {p.pp}")
    parts.append(f"--mem-fraction-static {y:.2f}")
    if p.context_length:
        parts.append(f"--context-length {context}")
    if p.kv_cache_dtype not in ("auto", ""):
        parts.append(f"--kv-cache-dtype {p.kv_cache_dtype}")
    if p.chunked_prefill_size:
        parts.append(f"--chunked-prefill-size {p.chunked_prefill_size}")
    if p.max_running_requests:
        parts.append(f"--max-running-requests {p.max_running_requests}")
    if p.cuda_graph_max_bs:
        new = key(p.sglang_version) >= key("0.5.23")
        flag = "--cuda-graph-max-bs-decode" if new else "--cuda-graph-max-bs"
        parts.append(f"{flag} {p.cuda_graph_max_bs}")
    return " ".join(parts)


def with_fraction(p: PlanInput, y: float) -> PlanInput:
    return replace(p, mem_fraction_static=y)
