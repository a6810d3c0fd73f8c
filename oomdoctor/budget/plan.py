"""`oomdoctor plan`: the budget of DESIGN §2 before a launch, from the card and the model.

It produces the same SglangBudget that `diagnose` rebuilds from a log (one JSON object for both),
plus what a launch needs to know: tokens, concurrency at the context length, the problems worst
first, the smallest change of --mem-fraction-static that works, and, where no fraction works,
the levers that do (plan_levers.py), each with a launch command that was checked to work.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.budget import cards, multimodal, sglang_defaults
from oomdoctor.budget.formulas import CONTEXT_OVERHEAD_GIB, GIB, kv_at, round_up
from oomdoctor.budget.model_config import ModelShape
from oomdoctor.budget.recommend import (
    fmt_y,
    lower_candidates,
    raise_candidates,
    recommend,
    window_text,
)
from oomdoctor.incident.versions import key
from oomdoctor.model import Scalar, SglangBudget, Window

#: NCCL adds a little to the context overhead with tensor or pipeline parallelism.
NCCL_GIB = 0.3
CONTEXT_GIB = CONTEXT_OVERHEAD_GIB
#: Online FP8 (`--quantization fp8`) stores linear layers in one byte; embeddings and the LM head
#: stay 16-bit. Without the model's shape the FP8 size is taken as this share of a 16-bit one.
FP8_SHARE_WITHOUT_SHAPE = 0.55

#: GPUs in one node: a launch over more spans nodes (SGLang's --nnodes).
GPUS_PER_NODE = 8

#: The problems a launch can have, worst first; the verdict is the first one present.
PROBLEMS = ("will_not_start", "context_does_not_fit", "thin_headroom")
#: `plan`'s exit status per verdict (README "Exit codes"): 1 when the launch fails its purpose.
EXIT_STATUS = MappingProxyType(
    {"fine": 0, "thin_headroom": 0, "context_does_not_fit": 1, "will_not_start": 1}
)


@dataclass(frozen=True)
class PlanInput:
    card_mib: float | None = None
    card_name: str | None = None
    pre_gib: float | None = None  # free memory before weights, when the user knows it
    weights_gib: float | None = None  # the whole checkpoint; each GPU holds 1/(TP×PP) of it
    bytes_per_token: int | None = None  # per GPU at `tp`
    model: ModelShape | None = None
    model_path: str | None = None
    tp: int = 1
    pp: int = 1
    kv_cache_dtype: str = "auto"
    quantization: str | None = None  # "fp8": online FP8 of a 16-bit checkpoint
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_flag: str = "--cuda-graph-max-bs"  # the spelling the user gave
    max_running_requests: int | None = None
    mem_fraction_static: float | None = None
    sglang_version: str = "0.5.23"


class Problem(NamedTuple):
    kind: str  # one of PROBLEMS
    text: str


class Lever(NamedTuple):
    """A change other than the fraction that makes the launch work, checked by re-planning."""

    name: str  # "tp", "fp8_weights", "fp8_kv", "context", "chunked_prefill"
    text: str
    plan: Plan


@dataclass(frozen=True)
class Plan:
    inputs: PlanInput
    budget: SglangBudget
    problems: tuple[Problem, ...]
    concurrency: float | None
    #: the smallest change of --mem-fraction-static that works (None: keep it, or none works)
    recommended: float | None
    #: the launch command, at the recommended fraction or today's; None when neither works
    command: str | None
    levers: tuple[Lever, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: one sentence: why the recommended (or kept) fraction, or which term does not fit
    why: str | None = None

    @property
    def verdict(self) -> str:
        return self.problems[0].kind if self.problems else "fine"

    @property
    def summary(self) -> str:
        if not self.problems:
            b = self.budget
            tokens = f" ({b.kv_tokens:,} tokens)" if b.kv_tokens else ""
            return f"Fine: {b.kv_gib or 0:.2f} GiB of KV{tokens}; keep the launch as it is."
        first, *rest = self.problems
        return " ".join([first.text, *(f"Also: {p.text}" for p in rest)])

    @property
    def works(self) -> bool:
        """It starts and one full-context request fits (thin headroom is a warning)."""
        return EXIT_STATUS[self.verdict] == 0

    @property
    def fine(self) -> bool:
        return not self.problems


def weights_per_gpu(p: PlanInput) -> tuple[float, str] | None:
    """GiB of weights on one GPU and where the figure comes from."""
    ranks = p.tp * p.pp
    split = f" ÷ {ranks} GPUs (TP×PP)" if ranks > 1 else ""
    fp8 = p.quantization == "fp8"
    if p.weights_gib is not None:
        total = p.weights_gib * (FP8_SHARE_WITHOUT_SHAPE if fp8 else 1.0)
        how = f"--weights {p.weights_gib:.2f} GiB" + (
            f" × {FP8_SHARE_WITHOUT_SHAPE} in FP8 (linear layers in one byte, embeddings 16-bit)"
            if fp8
            else ""
        )
        return total / ranks, how + split
    if p.model is None:
        return None
    m = p.model
    if not fp8:
        return m.weights_gib_per_gpu(p.tp, p.pp), f"the {m.weights_from}{split}"
    # Embeddings and LM head (2·vocab·hidden) stay at the model dtype.
    embed = 2 * m.vocab * m.hidden * m.dtype_bytes
    total_bytes = (m.weight_bytes - embed) / m.dtype_bytes + embed
    return total_bytes / ranks / GIB, f"the {m.weights_from}, linear layers in FP8{split}"


def _args(p: PlanInput) -> dict[str, Scalar]:
    args: dict[str, Scalar] = {"tp_size": p.tp, "pp_size": p.pp}
    if p.chunked_prefill_size is not None:
        args["chunked_prefill_size"] = p.chunked_prefill_size
    if p.cuda_graph_max_bs is not None:
        args["cuda_graph_max_bs"] = p.cuda_graph_max_bs
    if p.model is not None and p.model.mla_dims is not None:
        args["model_path"] = "deepseek"  # the MLA branch of SGLang's graph reserve
    return args


def _pre_and_card(p: PlanInput, notes: list[str]) -> tuple[float, float, str]:
    """pre, the card's MiB, and what that card figure is."""
    if p.pre_gib is not None:
        pre = p.pre_gib
    elif p.card_mib is not None:
        overhead = CONTEXT_GIB + (NCCL_GIB if p.tp * p.pp > 1 else 0.0)
        pre = p.card_mib / 1024 - overhead
        notes.append(
            f"pre is estimated: memory.total {p.card_mib / 1024:.2f} GiB − {overhead:.2f} GiB of "
            "CUDA context; give --pre-load-memory when a log shows the real value"
        )
    else:
        raise ValueError("give the card (--gpu NAME or --gpu-mem SIZE) or --pre-load-memory")
    if pre <= 0:
        raise ValueError("the memory free before weights must be more than 0")
    if p.card_mib is not None:
        return pre, p.card_mib, p.card_name or f"{p.card_mib:.0f} MiB card"
    # As `diagnose` does for a log that names no card (budget/sglang.py): the common card just
    # above pre + context, else pre + context itself; the note says which.
    estimate = (pre + CONTEXT_GIB) * 1024
    guessed = cards.guess(estimate)
    if guessed is not None:
        notes.append(
            f"the card is not given: taken as an {guessed[0]} ({guessed[1]} MiB), the common card "
            f"just above pre + {CONTEXT_GIB:.2f} GiB of CUDA context (give --gpu or --gpu-mem)"
        )
        return (
            pre,
            float(guessed[1]),
            f"an {guessed[0]}, the common card just above pre + {CONTEXT_GIB:.2f} GiB of CUDA "
            "context",
        )
    notes.append(
        f"the card is not given: its memory is taken as pre + {CONTEXT_GIB:.2f} GiB of context "
        "(give --gpu or --gpu-mem for SGLang's default fraction and reserve of a real card)"
    )
    return pre, estimate, f"card estimated as pre + {CONTEXT_GIB:.2f} GiB of CUDA context"


def evaluate(p: PlanInput) -> Plan:
    """One launch as given (no levers); raises ValueError when the inputs cannot give a budget."""
    notes: list[str] = []
    era = sglang_defaults.era_of(p.sglang_version, p.sglang_version)
    pre, card_mib, card_is = _pre_and_card(p, notes)
    per_gpu = weights_per_gpu(p)
    if per_gpu is None:
        raise ValueError("give the model (--model DIR|config.json) or --weights SIZE")
    weights, weights_how = per_gpu
    notes.append(f"weights {weights:.2f} GiB per GPU, from {weights_how}")
    if p.cuda_graph_max_bs and p.cuda_graph_flag != graph_flag(p.sglang_version):
        notes.append(
            f"{p.cuda_graph_flag} {p.cuda_graph_max_bs} is written "
            f"{graph_flag(p.sglang_version)} {p.cuda_graph_max_bs} in the launch: that is its "
            f"name in SGLang {p.sglang_version} (0.5.23 renamed it)"
        )
    bpt = p.bytes_per_token
    if bpt is None and p.model is not None:
        bpt = p.model.bytes_per_token(p.tp, p.kv_cache_dtype)
        if p.pp > 1:  # each pipeline stage holds the KV of its own layers, the first the most
            layers = max(p.model.layers, 1)
            bpt = -(-bpt * -(-layers // p.pp) // layers)
    context = p.context_length or (p.model.max_context if p.model is not None else None)

    args = _args(p)
    y = p.mem_fraction_static
    y_source = "given"
    reserve = sglang_defaults.reserve(card_mib, args, era)
    if y is None:  # sglang_defaults.default_fraction, from the reserve already at hand
        y = round(sglang_defaults.ceiling(card_mib, reserve), 3)
        y_source = f"SGLang {era} default for a {card_mib:.0f} MiB card"
    adj = multimodal.adjustment(p.model, era)
    factor = 1.0
    if adj is not None and (p.mem_fraction_static is None or adj.given_too):
        factor = adj.factor
        y = round(y * factor, 4)
        y_source += f", × {factor:.4f} for a multimodal model ({adj.basis})"
    post = pre - weights
    if p.model is not None and multimodal.is_multimodal(p.model):
        notes.append(
            multimodal.encoder_note(p.model, adj, p.mem_fraction_static is not None, (1 - y) * pre)
        )
    kv = kv_at(y, pre, post)
    tokens = int(kv * GIB // bpt) if bpt and kv > 0 else None
    y_zero = 1 - post / pre
    need = context * bpt / GIB if context and bpt else 0.0
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
            y_zero + need / pre,
            (
                f"a KV pool for one request of the context length: {context} tokens × {bpt} B = "
                f"{need:.2f} GiB"
                if need
                else "a KV pool that is not empty"
            ),
            sglang_defaults.ceiling(card_mib, reserve),
            f"a runtime reserve of {reserve.gib:.2f} GiB ({reserve.basis}) of a "
            f"{card_mib / 1024:.2f} GiB card ({card_is})",
        ),
        reserve_gib=reserve.gib,
        fraction_factor=factor,
        fraction_factor_why=adj.basis if adj is not None and factor != 1.0 else None,
    )
    concurrency = tokens / context if tokens and context else None
    problems = _problems(budget, tokens, context)
    draft = Plan(p, budget, problems, concurrency, None, None, notes=tuple(notes))
    passed = p.mem_fraction_static if p.mem_fraction_static is not None else y
    return replace(draft, command=command(p, passed, context) if draft.works else None)


def _problems(b: SglangBudget, tokens: int | None, context: int | None) -> tuple[Problem, ...]:
    assert b.kv_gib is not None and b.dynamic_gib is not None and b.mem_fraction_static is not None
    y, high = b.mem_fraction_static, b.window.high
    found: list[Problem] = []
    if b.post_gib is not None and b.post_gib <= 0:
        found.append(
            Problem(
                "will_not_start",
                f"Will not start: the weights per GPU ({b.weights_gib or 0:.2f} GiB) are more than "
                f"the memory free before loading ({b.pre_gib or 0:.2f} GiB); no fraction holds them.",
            )
        )
    elif b.kv_gib <= 0:
        found.append(
            Problem(
                "will_not_start",
                f"Will not start: at --mem-fraction-static {y:.3f} the static share "
                f"{b.static_gib or 0:.2f} GiB does not cover the weights "
                f"({b.weights_gib or 0:.2f} GiB per GPU); the KV pool would be {b.kv_gib:.2f} GiB.",
            )
        )
    elif tokens is not None and context is not None and tokens < context:
        found.append(
            Problem(
                "context_does_not_fit",
                f"One request of the full context ({context:,} tokens) does not fit: the KV pool "
                f"holds {tokens:,} tokens ({tokens / context:.2f} of such a request).",
            )
        )
    if high is not None and round(y, 3) > round(high, 3):
        found.append(
            Problem(
                "thin_headroom",
                f"Activation headroom is thin: y {y:.3f} is above {high:.3f}, the most that leaves "
                f"SGLang's runtime reserve ({b.reserve_gib or 0:.2f} GiB on this card) outside the "
                f"static share; {b.dynamic_gib:.2f} GiB is left for activations and CUDA graphs.",
            )
        )
    return tuple(found)


def why(now: Plan, value: float | None) -> str | None:
    """The sentence `diagnose` would give for this budget (budget/recommend.py); a finer value
    than its first choice (a rounding that landed on a bound) says so."""
    b = now.budget
    if b.window.low is None:
        return None
    chosen = recommend(b)
    if value is None or value == chosen.value:
        return chosen.why
    return (
        f"{fmt_y(value)} is the nearest value to pass inside the window "
        f"{window_text(b.window.low, b.window.high)}: {fmt_y(chosen.value or value)}, the usual "
        "choice, lands on a bound once rounded."
    )


def fixed_by_fraction(now: Plan) -> Plan | None:
    """The one recommended fraction (budget/recommend.py, as `diagnose` uses it), checked by
    re-planning; when a rounding lands it on a bound, the next finer candidate (None: none)."""
    b = now.budget
    low, high, y = b.window.low, b.window.high, b.mem_fraction_static
    if low is None or high is None or y is None or low >= high:
        return None
    first = recommend(b).value
    if first is None:
        return None
    more = raise_candidates(low) if first > y else lower_candidates(high)
    factor = b.fraction_factor if b.fraction_factor > 0 else 1.0
    for value in dict.fromkeys([first, *more]):
        if low < value <= high:
            # 0.3.6/0.4.6 lower even a passed value for a VLM: pass what gives `value`
            passed = value if factor == 1.0 else round_up(value / factor, 0.001)
            plan = evaluate(replace(now.inputs, mem_fraction_static=passed))
            if plan.fine:
                return plan
    return None


def graph_flag(version: str) -> str:
    """The decode CUDA-graph batch flag of a release (0.5.23 renamed it)."""
    return "--cuda-graph-max-bs-decode" if key(version) >= key("0.5.23") else "--cuda-graph-max-bs"


def command(p: PlanInput, y: float, context: int | None) -> str:
    model = shlex.quote(p.model_path) if p.model_path else "MODEL"  # a path is pasted into a shell
    parts = ["python -m sglang.launch_server", f"--model-path {model}"]
    if p.tp > 1:
        parts.append(f"--tp-size {p.tp}")
    if p.pp > 1:
        parts.append(f"--pp-size {p.pp}")
    nodes = -(-p.tp * p.pp // GPUS_PER_NODE)
    if nodes > 1:  # this is node 0's command; the text says what the others change
        parts.append(f"--nnodes {nodes} --node-rank 0 --dist-init-addr HEAD_NODE_IP:20000")
    fmt = f"{y:.2f}" if round(y, 2) == round(y, 4) else f"{y:.3f}"
    parts.append(f"--mem-fraction-static {fmt}")
    if p.quantization:
        parts.append(f"--quantization {p.quantization}")
    if p.context_length:
        parts.append(f"--context-length {context}")
    if p.kv_cache_dtype not in ("auto", ""):
        parts.append(f"--kv-cache-dtype {p.kv_cache_dtype}")
    if p.chunked_prefill_size:
        parts.append(f"--chunked-prefill-size {p.chunked_prefill_size}")
    if p.max_running_requests:
        parts.append(f"--max-running-requests {p.max_running_requests}")
    if p.cuda_graph_max_bs:
        parts.append(f"{graph_flag(p.sglang_version)} {p.cuda_graph_max_bs}")
    return " ".join(parts)
