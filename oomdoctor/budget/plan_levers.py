"""The levers `plan` offers when no --mem-fraction-static makes a launch work.

First on the cards the user has: the smallest set of changes among a shorter context (the
longest that fits), a smaller chunked prefill, an FP8 KV cache and FP8 weights, every set of one
change, then of two, and so on; a set is offered only when no smaller set inside it already
works. Then more cards: the smallest tensor-parallel size that works alone, and FP8 weights on
fewer cards than that. Each lever is re-planned with its changes, at today's fraction or at the
one recommended fraction (budget/recommend.py), and offered only when that plan is fine: a lever
never comes with a command that would fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import combinations

from oomdoctor.budget import sglang_defaults
from oomdoctor.budget.formulas import GIB, kv_at, round_down
from oomdoctor.budget.plan import (
    GPUS_PER_NODE,
    Lever,
    Plan,
    PlanInput,
    evaluate,
    fixed_by_fraction,
    why,
)

#: Tensor-parallel sizes tried, smallest first; above GPUS_PER_NODE the launch spans nodes.
TP_SIZES = (2, 4, 8, 16)
#: Pipeline-parallel sizes tried when no TP size works alone.
PP_SIZES = (2, 4)
#: Chunked-prefill sizes tried, largest first (SGLang's reserve grows with it in 0.5.10+).
CHUNK_SIZES = (4096, 2048, 1024)
#: A shorter context is offered in steps of this many tokens, and never below one step.
CONTEXT_STEP = 1024
#: The changes that keep the user's cards, in the order they are preferred.
CHANGES = ("context", "chunked_prefill", "fp8_kv", "fp8_weights")
#: At most this many sets of changes on the same cards are offered.
MAX_SAME_CARDS = 3


def solve(p: PlanInput) -> Plan | None:
    """The launch p, fixed by the fraction if it needs it (fixed_by_fraction returns only a
    fine plan); None when even that fails."""
    plan = evaluate(p)
    return plan if plan.fine else fixed_by_fraction(plan)


def _sixteen_bit(p: PlanInput) -> bool:
    m = p.model
    return m is None or (m.quantization is None and m.dtype_bytes == 2.0)


def _with_tp(p: PlanInput, tp: int) -> PlanInput:
    bpt = p.bytes_per_token
    if bpt is not None:  # given for today's TP: the KV heads split across the new one
        bpt = -(-bpt * p.tp // tp)
    return replace(p, tp=tp, bytes_per_token=bpt)


def _today_chunk(p: PlanInput, now: Plan) -> int:
    era = sglang_defaults.era_of(p.sglang_version, p.sglang_version)
    card_mib = (now.budget.capacity_gib or 0.0) * 1024
    return p.chunked_prefill_size or sglang_defaults.chunked_default(card_mib, era)


def _fp8_kv(p: PlanInput, now: Plan) -> PlanInput | None:
    if p.kv_cache_dtype not in ("auto", "bf16", "bfloat16") or not _sixteen_bit(p):
        return None
    if now.budget.bytes_per_token is None:
        return None
    bpt = None if p.bytes_per_token is None else max(1, p.bytes_per_token // 2)
    return replace(p, kv_cache_dtype="fp8_e4m3", bytes_per_token=bpt)


def _fp8_weights(p: PlanInput, now: Plan) -> PlanInput | None:
    if p.quantization is not None or not _sixteen_bit(p):
        return None
    return replace(p, quantization="fp8")


def _longest_context(q: PlanInput) -> Plan | None:
    """q with the longest context (in CONTEXT_STEP tokens) that fits below today's, or None."""
    b = evaluate(q).budget
    if b.context_len is None or not b.bytes_per_token or b.window.high is None:
        return None
    assert b.pre_gib is not None and b.post_gib is not None
    top = round_down(b.window.high)  # the highest fraction that plan would keep or pass
    y = b.mem_fraction_static
    if y is not None and round(y, 3) <= round(b.window.high, 3):
        top = max(top, y)
    kv = kv_at(top, b.pre_gib, b.post_gib) - b.kv_reserve_gib
    tokens = int(kv * GIB // b.bytes_per_token) if kv > 0 else 0
    longest = min(tokens, b.context_len - 1) // CONTEXT_STEP * CONTEXT_STEP
    for length in (longest, longest - CONTEXT_STEP):  # one step back when rounding bites
        if length < CONTEXT_STEP:
            return None
        plan = solve(replace(q, context_length=length))
        if plan is not None:
            return plan
    return None


def _try(p: PlanInput, now: Plan, names: tuple[str, ...]) -> Plan | None:
    """The plan with every change in ``names``, or None when one does not apply or it fails."""
    q: PlanInput | None = p
    for name, change in (("fp8_kv", _fp8_kv), ("fp8_weights", _fp8_weights)):
        if name in names and q is not None:
            q = change(q, now)
    if q is None:
        return None
    chunks: tuple[int | None, ...] = (None,)
    if "chunked_prefill" in names:
        chunks = tuple(s for s in CHUNK_SIZES if s < _today_chunk(p, now))
    for chunk in chunks:  # the largest chunk that works: prefill stays fast
        r = q if chunk is None else replace(q, chunked_prefill_size=chunk)
        plan = _longest_context(r) if "context" in names else solve(r)
        if plan is not None:
            return plan
    return None


def _changes_text(p: PlanInput, now: Plan, plan: Plan) -> str:
    q, bits = plan.inputs, []
    if q.context_length != p.context_length and q.context_length is not None:
        today = now.budget.context_len
        bits.append(
            f"the longest context that fits (--context-length {q.context_length}, today {today})"
        )
    if q.chunked_prefill_size != p.chunked_prefill_size:
        bits.append(
            f"a smaller prefill chunk (--chunked-prefill-size {q.chunked_prefill_size}, today "
            f"{_today_chunk(p, now)}: SGLang reserves less for activations)"
        )
    if q.kv_cache_dtype != p.kv_cache_dtype:
        bits.append("an FP8 KV cache (--kv-cache-dtype fp8_e4m3, half the bytes per token)")
    if q.quantization != p.quantization:
        sure = "the checkpoint is 16-bit" if p.model else "if the checkpoint is 16-bit"
        bits.append(f"FP8 weights (--quantization fp8; {sure})")
    return " and ".join(bits)


def same_cards(p: PlanInput, now: Plan) -> list[Lever]:
    """The smallest sets of changes that fit on today's cards (none bigger than the first)."""
    found: list[tuple[tuple[str, ...], Plan]] = []
    for size in range(1, len(CHANGES) + 1):
        for names in combinations(CHANGES, size):
            if any(set(done) <= set(names) for done, _ in found):
                continue
            plan = _try(p, now, names)
            if plan is not None:
                found.append((names, plan))
        if found:
            break  # a bigger set is never the smallest change
    return [
        Lever("+".join(names), f"{_sentence(_changes_text(p, now, plan))}: {_gives(plan)}.", plan)
        for names, plan in found[:MAX_SAME_CARDS]
    ]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _nodes(tp: int, pp: int) -> str:
    if tp * pp <= GPUS_PER_NODE:
        return ""
    n = -(-tp * pp // GPUS_PER_NODE)
    return (
        f"; {tp * pp} GPUs are {n} nodes of {GPUS_PER_NODE}: run the command on each with "
        f"--nnodes {n}, its own --node-rank (0 to {n - 1}) and the first node's --dist-init-addr"
    )


def _heads_split(p: PlanInput, tp: int) -> bool:
    return p.model is None or p.model.heads % tp == 0


def more_cards(p: PlanInput, now: Plan) -> list[Lever]:
    """The smallest TP that works with no other change, and FP8 weights on fewer cards."""
    out: list[Lever] = []
    tp_alone = None
    for tp in (t for t in TP_SIZES if t > p.tp and _heads_split(p, t)):
        plan = solve(_with_tp(p, tp))
        if plan is not None:
            tp_alone = tp
            out.append(
                Lever(
                    "tp",
                    f"Tensor parallelism {tp} (--tp-size {tp}): {_gives(plan)}{_nodes(tp, p.pp)}.",
                    plan,
                )
            )
            break
    if tp_alone is None:  # no TP size splits the model and fits: pipeline stages instead
        out.extend(_pp(p))
    if _fp8_weights(p, now) is None:
        return out
    for tp in (t for t in TP_SIZES if t > p.tp and _heads_split(p, t)):
        if tp_alone is not None and tp >= tp_alone:
            break  # more GPUs alone do it: FP8 on top buys nothing
        plan = solve(replace(_with_tp(p, tp), quantization="fp8"))
        if plan is not None:
            bits = "the checkpoint is 16-bit" if p.model else "if the checkpoint is 16-bit"
            out.insert(
                0,
                Lever(
                    "tp+fp8_weights",
                    f"FP8 weights with tensor parallelism {tp} (--quantization fp8 --tp-size {tp};"
                    f" {bits}): {_gives(plan)}{_nodes(tp, p.pp)}.",
                    plan,
                ),
            )
            break
    return out


def _pp(p: PlanInput) -> list[Lever]:
    """The smallest pipeline-parallel size that works at the largest TP one node allows."""
    tps = [t for t in (p.tp, *TP_SIZES) if t >= p.tp and t <= GPUS_PER_NODE and _heads_split(p, t)]
    tp = max(tps, default=p.tp)
    for pp in (s for s in PP_SIZES if s > p.pp):
        plan = solve(replace(_with_tp(p, tp), pp=pp))
        if plan is not None:
            return [
                Lever(
                    "pp",
                    f"Pipeline parallelism {pp} with tensor parallelism {tp} (--pp-size {pp} "
                    f"--tp-size {tp}): {_gives(plan)}{_nodes(tp, pp)}.",
                    plan,
                )
            ]
    return []


def _gives(plan: Plan) -> str:
    b = plan.budget
    tokens = f" ({b.kv_tokens:,} tokens)" if b.kv_tokens else ""
    return (
        f"{b.weights_gib or 0:.2f} GiB of weights per GPU, and at --mem-fraction-static "
        f"{b.mem_fraction_static or 0:.3g} a KV pool of {b.kv_gib or 0:.2f} GiB{tokens}"
    )


#: The searches in the order they are offered: today's cards first, then more of them.
SEARCHES: tuple[Callable[[PlanInput, Plan], list[Lever]], ...] = (same_cards, more_cards)


def make(p: PlanInput) -> Plan:
    """The plan: today's launch, the smallest fraction change that works, else the levers."""
    now = evaluate(p)
    if now.fine:
        return replace(now, why=why(now, None))
    fixed = fixed_by_fraction(now)
    if fixed is not None:
        value = fixed.budget.mem_fraction_static
        return replace(now, recommended=value, command=fixed.command, why=why(now, value))
    return replace(now, levers=find(now), why=why(now, None))


def find(now: Plan) -> tuple[Lever, ...]:
    return tuple(lever for search in SEARCHES for lever in search(now.inputs, now))
