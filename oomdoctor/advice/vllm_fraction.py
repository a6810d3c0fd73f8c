"""Advice for vLLM, in vLLM's terms: --gpu-memory-utilization (u) is a share of TOTAL memory for
weights, activations and the KV cache together, so the directions are:

- no KV cache fits at startup: RAISE u (the KV cache grows by total × Δu), or shorten
  --max-model-len, or make each token cheaper (--kv-cache-dtype fp8);
- an activation OOM while serving: LOWER u (what u leaves out is where CUDA graphs and anything the
  profile run did not see must fit), or shrink the batch (--max-num-batched-tokens, --max-num-seqs);
- another process on the GPU: free it, or size u to what is free;
- the multimodal profile run: fewer/smaller dummy items (--limit-mm-per-prompt, processor limits).
"""

from __future__ import annotations

from oomdoctor.advice.context import Context, halve
from oomdoctor.budget import targets
from oomdoctor.budget.targets import U_CEILING, tokens_in
from oomdoctor.model import Action

FLAG = "--gpu-memory-utilization"
DEFAULT_U = 0.9
#: The largest single GPU memory (GiB) worth sizing for (B300 288 GB); beyond it no u helps.
LARGEST_CARD_GIB = 268.0


def _u(ctx: Context) -> float | None:
    return ctx.vllm.gpu_memory_utilization


def _fmt(u: float | None) -> str:
    return "unknown" if u is None else f"{u:.2f}"


def _kv_tokens_at(ctx: Context, kv_gib: float) -> str:
    bpt = ctx.vllm.bytes_per_token
    if not bpt or kv_gib <= 0:
        return ""
    return f" (≈{tokens_in(kv_gib, bpt):,} tokens at {bpt:,} B/token)"


def raise_utilization(ctx: Context) -> list[Action]:
    """Startup: no KV cache (or none big enough for one max_model_len request) fits in u."""
    b = ctx.vllm
    u, total, kv = _u(ctx), b.capacity_gib, b.kv_gib
    out: list[Action] = []
    if u is not None and total and kv is not None and b.window.low is not None:
        target, new_kv, _ = targets.raise_u(b)
        assert new_kv is not None
        if target <= u or b.window.low > U_CEILING:
            out.append(
                Action(
                    text=f"No --gpu-memory-utilization is enough: the weights and the profile "
                    f"run leave {kv:.2f} GiB for the KV cache at u = {u:.2f}, and it would need "
                    f"u ≥ {b.window.low:.2f} ({b.window.low_basis}). Spread the model over more GPUs "
                    "(--tensor-parallel-size), load quantised weights, or shorten --max-model-len.",
                )
            )
        else:
            out.append(
                Action(
                    text=f"Raise --gpu-memory-utilization to {target:.2f} (today {u:.2f}): the KV "
                    f"cache grows by total × Δu to {new_kv:.2f} GiB{_kv_tokens_at(ctx, new_kv)}; "
                    f"the smallest workable value is {b.window.low:.2f} ({b.window.low_basis}).",
                    flag=FLAG,
                    direction="raise",
                    value=target,
                    current=u,
                    basis=f"KV(u) = KV({u:.2f}) + (u − {u:.2f})·total = {kv:.2f} + "
                    f"(u − {u:.2f})·{total:.2f}; u_min {b.window.low:.2f}, u_max "
                    f"{_fmt(b.window.high)} ({b.window.high_basis})",
                )
            )
    elif kv is not None and max((b.kv_needed_gib or 0.0) - kv, -kv) > 0.005:
        missing = max((b.kv_needed_gib or 0.0) - kv, -kv)
        u_now = u if u is not None else DEFAULT_U
        today = f"today {u:.2f}" if u is not None else f"vLLM's default is {DEFAULT_U:.1f}"
        # Raising u adds (u' − u)·total: closing the gap at the ceiling needs a card this big.
        card = targets.card_for_gap(missing, u_now)
        needs = (
            f", one {b.max_model_len:,}-token request needs {b.kv_needed_gib:.2f}"
            if b.kv_needed_gib and b.max_model_len
            else ""
        )
        if card > LARGEST_CARD_GIB:
            out.append(
                Action(
                    text=f"No --gpu-memory-utilization closes this gap: the KV cache is "
                    f"{missing:.2f} GiB short (today {kv:.2f} GiB{needs}), and raising u from "
                    f"{u_now:.2f} to {U_CEILING:.2f} adds {U_CEILING - u_now:.2f} × the GPU's "
                    f"memory, which covers it only on a card of ≥ {card:.0f} GiB. Shorten "
                    "--max-model-len (below), spread the model over more GPUs "
                    "(--tensor-parallel-size 2 halves the per-GPU weights and KV cache), load "
                    "quantised weights, or use a card with more memory.",
                )
            )
        else:
            extra = "" if b.kv_needed_gib else " plus room for the requests themselves"
            out.append(
                Action(
                    text=f"Raise --gpu-memory-utilization ({today}) so the KV cache gets "
                    f"≥ {missing:.2f} GiB more{extra} (today {kv:.2f} GiB{needs}): by "
                    f"{missing:.2f} GiB ÷ the GPU's total memory, which works only on a card "
                    f"of ≥ {card:.0f} GiB (at u = {U_CEILING:.2f}). vLLM V1 does not print "
                    "the total at INFO; give oomdoctor a GPU snapshot (--snapshot) for the "
                    "exact value.",
                    flag=FLAG,
                    direction="raise",
                    current=u,
                )
            )
    elif u is not None:
        out.append(
            Action(
                text=f"Raise --gpu-memory-utilization (today {u:.2f}): vLLM found no room for the "
                "KV cache in its budget. The log lacks the total/KV figures to compute by how "
                "much; each +0.01 adds 1% of the GPU's memory to the KV cache.",
                flag=FLAG,
                direction="raise",
                current=u,
            )
        )
    else:
        out.append(
            Action(
                text="Raise --gpu-memory-utilization (vLLM's default is 0.9): vLLM found no room "
                "for the KV cache in its budget.",
                flag=FLAG,
                direction="raise",
            )
        )
    out.extend(_shorter_context(ctx))
    out.append(
        Action(
            alternative=True,
            text="Or make each token cheaper: --kv-cache-dtype fp8 halves the KV cache per token "
            "(check the model's accuracy with it).",
            flag="--kv-cache-dtype",
            direction="set",
            value="fp8",
        )
    )
    return out


def _shorter_context(ctx: Context) -> list[Action]:
    b = ctx.vllm
    primary = ctx.primary
    estimated = primary.data.get("estimated") if primary else None
    length = b.max_model_len
    if isinstance(estimated, int) and estimated > 0:
        return [
            Action(
                alternative=True,
                text=f"Or cap --max-model-len at {estimated:,} (today "
                + (f"{length:,}" if length else "the model's default")
                + "): vLLM's own estimate of the longest request this KV cache can hold.",
                flag="--max-model-len",
                direction="lower",
                value=estimated,
                current=length,
            )
        ]
    fits = targets.model_len_fits(b)
    if length and b.kv_gib and fits is not None and 0 < fits < length:
        return [
            Action(
                alternative=True,
                text=f"Or cap --max-model-len at {fits:,} (today {length:,}): the "
                f"{b.kv_gib:.2f} GiB KV cache holds that many tokens at "
                f"{b.bytes_per_token:,} B/token.",
                flag="--max-model-len",
                direction="lower",
                value=fits,
                current=length,
            )
        ]
    return []


def lower_utilization(ctx: Context) -> list[Action]:
    """Serving: an allocation outside what the profile run measured did not fit."""
    b = ctx.vllm
    u = _u(ctx)
    out: list[Action] = []
    if ctx.primary is not None and ctx.primary.kind == "startup_free_memory":
        return _fit_startup_check(ctx)
    short = ctx.shortfall
    need = f" (at least {short:.2f} GiB more)" if short and short > 0 else ""
    lowered = targets.lower_u(b)
    if u is not None and lowered is not None:
        target, freed, kv_after = lowered
        kv_text = (
            f"; the KV cache shrinks to {kv_after:.2f} GiB{_kv_tokens_at(ctx, kv_after)}"
            if kv_after is not None
            else ""
        )
        if kv_after is not None and b.window.low is not None and target < b.window.low:
            out.append(
                Action(
                    text=f"Lowering --gpu-memory-utilization to {target:.2f} (today {u:.2f}) would "
                    f"free {freed:.2f} GiB but leave the KV cache below one max_model_len "
                    f"request (u_min {b.window.low:.2f}): shrink the batch instead (below), or "
                    "shorten --max-model-len.",
                )
            )
        else:
            out.append(
                Action(
                    text=f"Lower --gpu-memory-utilization to {target:.2f} (today {u:.2f}): "
                    f"{freed:.2f} GiB more stays outside vLLM's budget for the allocation that "
                    f"failed{kv_text}.",
                    flag=FLAG,
                    direction="lower",
                    value=target,
                    current=u,
                    basis=f"u − (requested − free + margin)/total; {b.window.high_basis}",
                )
            )
    elif u is not None:
        out.append(
            Action(
                text=f"Lower --gpu-memory-utilization (today {u:.2f}) to leave more memory "
                f"outside vLLM's budget{need}.",
                flag=FLAG,
                direction="lower",
                current=u,
            )
        )
    else:
        out.append(
            Action(
                text="Lower --gpu-memory-utilization (the log does not show today's value; vLLM's "
                f"default is {DEFAULT_U:.1f}) to leave more memory outside vLLM's budget{need}: "
                "each −0.01 leaves 1% of the GPU's memory for what the profile run did not see.",
                flag=FLAG,
                direction="lower",
            )
        )
    out.extend(_batch_levers(ctx))
    return out


def _fit_startup_check(ctx: Context) -> list[Action]:
    """vLLM's start-up check wants total × u ≤ the memory free at start: the largest u that
    passes, from the check's own numbers."""
    primary = ctx.primary
    data = primary.data if primary is not None else {}
    free, total, u = data.get("free"), data.get("total"), data.get("u")
    if not (isinstance(free, float) and isinstance(total, float) and total > 0):
        return [
            Action(
                text="Lower --gpu-memory-utilization until total × u fits in the memory free at "
                "start (the check's message prints both).",
                flag=FLAG,
                direction="lower",
            )
        ]
    fit = targets.fit_startup_check(free, total)
    current = u if isinstance(u, float) else None
    return [
        Action(
            text=f"Set --gpu-memory-utilization {fit:.2f}"
            + (f" (today {current:g})" if current is not None else "")
            + f": the start-up check needs total × u ≤ free, {fit:.2f} × {total:.2f} = "
            f"{fit * total:.2f} ≤ {free:.2f} GiB; the KV cache loses "
            f"{((current or fit) - fit) * total:.2f} GiB.",
            flag=FLAG,
            direction="lower",
            value=fit,
            current=current,
            basis=f"floor(free / total, 0.01) = floor({free:.2f} / {total:.2f})",
        )
    ]


def _batch_levers(ctx: Context) -> list[Action]:
    out: list[Action] = []
    tokens = ctx.arg_int("max_num_batched_tokens")
    seqs = ctx.arg_int("max_num_seqs")
    dummy = ctx.primary.data.get("dummy_requests") if ctx.primary else None
    if seqs is None and isinstance(dummy, int):
        seqs = dummy  # the sampler warm-up runs max_num_seqs dummy requests
    out.append(
        halve(
            "--max-num-batched-tokens",
            tokens,
            "the activation peak of a forward grows with the tokens it carries.",
            example=4096,
        )
    )
    out.append(
        halve(
            "--max-num-seqs",
            seqs,
            "fewer sequences per step, smaller sampler and logits buffers"
            + ("" if seqs else " (V1's default is 256; 1024 in 0.8.0 - 0.8.2)")
            + ".",
            example=128,
        )
    )
    graph = ctx.vllm.graph_gib
    if graph and graph >= 0.5:
        out.append(
            Action(
                text=f"CUDA graphs took {graph:.2f} GiB outside the budget: --enforce-eager gives it "
                "back (slower decoding).",
                flag="--enforce-eager",
                direction="set",
            )
        )
    return out


def graph_capture(ctx: Context) -> list[Action]:
    u = _u(ctx)
    return [
        Action(
            text="CUDA-graph capture ran out outside vLLM's budget: lower "
            "--gpu-memory-utilization to leave room for the graphs, capture fewer sizes "
            "(--compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 8, 16, 32]}'), or "
            "run --enforce-eager.",
            flag=FLAG,
            direction="lower",
            current=u,
            value=targets.graph_room_u(u) if u is not None else None,
        )
    ]
