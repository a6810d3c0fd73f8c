"""The levers `plan` offers when no --mem-fraction-static makes a launch work.

Each lever is a change of the launch (a smaller chunked prefill, an FP8 KV cache, a shorter
context, FP8 weights, more tensor parallelism). Each is re-planned with the change, at today's
fraction or at the smallest fraction change that then works, and offered only when that plan is
fine: a lever never comes with a command that would fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from oomdoctor.budget import sglang_defaults
from oomdoctor.budget.formulas import GIB, kv_at, round_down
from oomdoctor.budget.plan import Lever, Plan, PlanInput, evaluate, fixed_by_fraction, why

#: Tensor-parallel sizes tried, smallest first (one node's worth).
TP_SIZES = (2, 4, 8)
#: Chunked-prefill sizes tried, largest first (SGLang's reserve grows with it in 0.5.10+).
CHUNK_SIZES = (4096, 2048, 1024)
#: A shorter context is offered in steps of this many tokens.
CONTEXT_STEP = 1024


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


def _tp(p: PlanInput, now: Plan) -> Iterator[Lever]:
    for tp in (t for t in TP_SIZES if t > p.tp):
        plan = solve(_with_tp(p, tp))
        if plan is not None:
            yield Lever("tp", f"Tensor parallelism {tp} (--tp-size {tp}): {_gives(plan)}.", plan)
            return


def _fp8_weights(p: PlanInput, now: Plan) -> Iterator[Lever]:
    if p.quantization is not None or not _sixteen_bit(p):
        return
    alone = next(_tp(p, now), None)  # the smallest TP that works without FP8
    tp_alone = alone.plan.inputs.tp if alone is not None else None
    for tp in (p.tp, *(t for t in TP_SIZES if t > p.tp)):
        if tp_alone is not None and tp >= tp_alone:
            return  # more GPUs alone do it: FP8 on top buys nothing
        plan = solve(replace(_with_tp(p, tp), quantization="fp8"))
        if plan is not None:
            with_tp = f" with --tp-size {tp}" if tp != p.tp else ""
            bits = "the checkpoint is 16-bit" if p.model else "if the checkpoint is 16-bit"
            yield Lever(
                "fp8_weights",
                f"FP8 weights (--quantization fp8{with_tp}; {bits}): {_gives(plan)}.",
                plan,
            )
            return


def _fp8_kv(p: PlanInput, now: Plan) -> Iterator[Lever]:
    if p.kv_cache_dtype not in ("auto", "bf16", "bfloat16") or not _sixteen_bit(p):
        return
    if now.budget.bytes_per_token is None:
        return
    bpt = None if p.bytes_per_token is None else max(1, p.bytes_per_token // 2)
    plan = solve(replace(p, kv_cache_dtype="fp8_e4m3", bytes_per_token=bpt))
    if plan is not None:
        yield Lever(
            "fp8_kv",
            f"An FP8 KV cache (--kv-cache-dtype fp8_e4m3, half the bytes per token): "
            f"{_gives(plan)}.",
            plan,
        )


def _context(p: PlanInput, now: Plan) -> Iterator[Lever]:
    b = now.budget
    if b.context_len is None or not b.bytes_per_token or b.window.high is None:
        return
    assert b.pre_gib is not None and b.post_gib is not None
    y = round_down(b.window.high)
    kv = kv_at(y, b.pre_gib, b.post_gib)
    tokens = int(kv * GIB // b.bytes_per_token) if kv > 0 else 0
    longest = tokens // CONTEXT_STEP * CONTEXT_STEP
    if longest < CONTEXT_STEP or longest >= b.context_len:
        return
    plan = solve(replace(p, context_length=longest))
    if plan is not None:
        yield Lever(
            "context",
            f"A shorter context (--context-length {longest}, today {b.context_len}), the longest "
            f"that fits: {_gives(plan)}.",
            plan,
        )


def _chunked(p: PlanInput, now: Plan) -> Iterator[Lever]:
    era = sglang_defaults.era_of(p.sglang_version, p.sglang_version)
    card_mib = (now.budget.capacity_gib or 0.0) * 1024
    today = p.chunked_prefill_size or sglang_defaults.chunked_default(card_mib, era)
    for size in (s for s in CHUNK_SIZES if s < today):
        plan = solve(replace(p, chunked_prefill_size=size))
        if plan is not None:
            yield Lever(
                "chunked_prefill",
                f"A smaller prefill chunk (--chunked-prefill-size {size}, today {today}): SGLang "
                f"reserves less for activations, so {_gives(plan)}.",
                plan,
            )
            return


def _gives(plan: Plan) -> str:
    b = plan.budget
    tokens = f" ({b.kv_tokens:,} tokens)" if b.kv_tokens else ""
    return (
        f"{b.weights_gib or 0:.2f} GiB of weights per GPU, and at --mem-fraction-static "
        f"{b.mem_fraction_static or 0:.3g} a KV pool of {b.kv_gib or 0:.2f} GiB{tokens}"
    )


#: The levers in the order they are offered: what costs least first.
LEVERS: tuple[Callable[[PlanInput, Plan], Iterator[Lever]], ...] = (
    _chunked,
    _fp8_kv,
    _context,
    _fp8_weights,
    _tp,
)


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
    return tuple(lever for finder in LEVERS for lever in finder(now.inputs, now))
