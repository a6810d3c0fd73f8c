"""What to change when what startup loads does not fit: the weights and the buffers built with
them, before the engine had a KV pool (advice kind ``static_footprint``).

The fraction flag only sizes the KV pool, which comes after: lowering it cannot make the weights
fit and raising it makes the pool worse. Whether the pool itself was being built decides between
"lower the fraction" and "fewer weights per GPU"; the log did not say, so both are named, with
the line that would tell.
"""

from __future__ import annotations

from oomdoctor.advice.context import Context
from oomdoctor.advice.sglang_levers import double_tp
from oomdoctor.model import Action
from oomdoctor.units import size


def _held(ctx: Context) -> str:
    oom = ctx.oom
    if oom is None:
        return "At startup, before the KV pool existed, an allocation failed"
    msg = oom.message
    held = oom.holders.self_gib
    text = "At startup, before the KV pool existed,"
    if held is not None and msg.total_gib is not None:
        text += f" this process already held {size(held)} of the {size(msg.total_gib)} card"
    else:
        text += " the card was full"
    if msg.requested_gib is not None:
        text += f" when {size(msg.requested_gib)} more was asked"
    return text


def sglang(ctx: Context) -> list[Action]:
    doubled, value, tp = double_tp(ctx)
    return [
        Action(
            text=_held(ctx) + ": what startup loads (the weights and the buffers built with them) "
            "does not fit this card. --mem-fraction-static only sizes the KV pool that comes "
            "after, so neither raising nor lowering it makes the weights fit."
        ),
        Action(
            text=f"Put fewer weights on each GPU: {doubled} halves them.",
            flag="--tp-size",
            direction="raise",
            value=value,
            current=tp,
        ),
        Action(
            text="Or load quantised weights (an FP8/AWQ/GPTQ checkpoint, --quantization fp8).",
            alternative=True,
        ),
        Action(
            text="Or use a card with more memory, or free this one of other processes.",
            alternative=True,
        ),
        Action(
            text="If the log printed `Load weight end` before the OOM, the weights did fit and "
            "the KV pool was being built: then lower --mem-fraction-static instead (the pool was "
            "sized larger than what was free).",
            alternative=True,
        ),
    ]


def vllm(ctx: Context) -> list[Action]:
    tp = ctx.arg_int("tensor_parallel_size")
    return [
        Action(
            text=_held(ctx) + ": what startup loads does not fit this card. "
            "--gpu-memory-utilization sizes the KV cache that comes after the weights."
        ),
        Action(
            text="Put fewer weights on each GPU: raise --tensor-parallel-size"
            + (f" (today {tp})." if tp else "."),
            flag="--tensor-parallel-size",
            direction="raise",
            value=tp * 2 if tp else None,
            current=tp,
        ),
        Action(
            text="Or load quantised weights (--quantization), or offload part of them "
            "(--cpu-offload-gb).",
            alternative=True,
        ),
        Action(
            text="Or use a card with more memory, or free this one of other processes.",
            alternative=True,
        ),
    ]
