"""SGLang advice that moves --mem-fraction-static, with the arithmetic shown (the values come
from budget/targets.py), and the generators that pair it with the levers of sglang_levers.py."""

from __future__ import annotations

from oomdoctor.advice.context import Context
from oomdoctor.advice.sglang_levers import (
    chunked_lever,
    double_tp,
    encoder_input_levers,
    fragmentation_fix,
    levers_for_empty_window,
    runtime_levers,
    serving_logprobs,
)
from oomdoctor.budget import targets
from oomdoctor.budget.recommend import recommend, window_text
from oomdoctor.budget.targets import RAISE_MARGIN, tokens_in
from oomdoctor.model import Action
from oomdoctor.units import size

FLAG = "--mem-fraction-static"


def _fmt_y(y: float | None) -> str:
    return "unknown" if y is None else f"{y:.2f}" if round(y, 2) == round(y, 4) else f"{y:.3f}"


def _tokens(ctx: Context, kv_gib: float) -> str:
    bpt = ctx.sglang.bytes_per_token
    if bpt is None or kv_gib <= 0:
        return ""
    return f" (≈{tokens_in(kv_gib, bpt):,} tokens at {bpt:,} B/token)"


def _window(ctx: Context) -> str:
    b = ctx.sglang
    if b.window.low is None or b.window.high is None:
        return ""
    return (
        f" The workable window: {window_text(b.window.low, b.window.high, b.mem_fraction_static)}."
    )


def raise_fraction(ctx: Context) -> list[Action]:
    if ctx.incident.engine == "sglang-omni":
        from oomdoctor.advice import omni

        colocated = omni.colocated_budget(ctx)
        if colocated:
            return colocated
    b = ctx.sglang
    y = b.mem_fraction_static
    if b.y_zero is None or b.pre_gib is None or b.post_gib is None:
        return [
            Action(
                text="Raise --mem-fraction-static: its static share does not cover the weights plus "
                "a KV pool. The log lacks the `Load weight begin/end` lines, so the exact value "
                "cannot be computed; add them (full startup log) and run oomdoctor again.",
                flag=FLAG,
                direction="raise",
                current=y,
            ),
            Action(
                text="Or, if a higher fraction then runs out at run time (or it is already 0.9 or "
                "more), no value of it works on this card: put fewer weights on each GPU (a "
                "higher --tp-size, quantised weights) or use a bigger card.",
                alternative=True,
            ),
        ]
    pre, post = b.pre_gib, b.post_gib
    y_min = b.window.low if b.window.low is not None else b.y_zero
    if b.window.empty:
        return _raise_into_empty_window(ctx, y_min)
    # One value for one budget: the same function picks it for `plan` (budget/recommend.py).
    # Today's value is left out: a log whose y is already above y_min gets raise_again below.
    chosen = recommend(b._replace(mem_fraction_static=None), _suggested_minimum(ctx))
    if chosen.value is None and b.window.high is None:  # y_min ≥ 1 with no upper bound
        return [
            Action(text=f"{chosen.why} Change what moves the bounds:"),
            *levers_for_empty_window(ctx),
        ]
    if chosen.value is None:
        return _raise_into_empty_window(ctx, y_min)
    rec = chosen.value
    kv, dynamic = targets.kv_pool_at(b, rec), targets.dynamic_at(rec, pre)
    assert kv is not None
    basis = (
        f"KV(y) = post − (1 − y)·pre = {post:.2f} − (1 − y)·{pre:.2f}; empty at y = 1 − post/pre = "
        f"{b.y_zero:.3f}; y_min {y_min:.3f} ({b.window.low_basis}); the value is the smallest "
        f"raise that works: y_min + {RAISE_MARGIN:.2f}, rounded up"
    )
    actions = [
        Action(
            text=f"Set {FLAG} {_fmt_y(rec)} (today {_fmt_y(y)}). The KV pool is empty below "
            f"{b.y_zero:.3f} (= 1 − {post:.2f}/{pre:.2f}); at {_fmt_y(rec)} it gets {kv:.2f} GiB"
            f"{_tokens(ctx, kv)} and leaves {dynamic:.2f} GiB for activations."
            + _window(ctx)
            + f" Why: {chosen.why}",
            flag=FLAG,
            direction="raise",
            value=rec,
            current=y,
            basis=basis,
        )
    ]
    if y is not None and y >= rec:
        again, again_value = targets.raise_again(rec, b.window.high)
        actions[0] = Action(
            text=f"The log's numbers say {FLAG} {_fmt_y(y)} should already leave a KV pool "
            f"(empty only below {b.y_zero:.3f}), yet SGLang found none: another pool (SWA, mamba "
            "state, a draft model) or a rank with less free memory took it. Raise the fraction "
            f"to {_fmt_y(again)} and check every rank's `avail mem`.",
            flag=FLAG,
            direction="raise",
            value=again_value,
            current=y,
            basis=basis,
        )
    share = b.weights_share or 0.0
    if share > 0.85:
        actions.extend(
            [
                Action(
                    text=f"Weights take {share:.0%} of the free memory ({b.weights_gib:.2f} of "
                    f"{pre:.2f} GiB), so even a high fraction leaves a small pool. Levers:"
                ),
                *levers_for_empty_window(ctx)[:3],
            ]
        )
    return actions


def _raise_into_empty_window(ctx: Context, y_min: float) -> list[Action]:
    """KV needs y ≥ y_min, the planned runtime reserve needs y ≤ y_max, and y_min > y_max.

    The reserve is an estimate; a fraction just above y_min still starts, with less room for
    activations than planned. Offer that (with the runtime levers that make it safe) while the
    dynamic share stays above a hard floor, and the levers that really move the bounds.
    """
    b = ctx.sglang
    assert b.pre_gib is not None and b.post_gib is not None and b.window.high is not None
    rec, kv, dynamic = targets.start_past_window(b, y_min, _suggested_minimum(ctx))
    assert kv is not None and dynamic is not None
    floor = targets.dynamic_floor(b)
    head = (
        f"No value of {FLAG} fits both bounds with today's other flags: the KV pool needs "
        f"y ≥ {y_min:.3f} ({b.window.low_basis}) but the runtime reserve needs y ≤ {b.window.high:.3f} "
        f"({b.window.high_basis})."
    )
    if rec >= 0.99 or dynamic < floor:
        return [Action(text=head + " Change what moves the bounds:"), *levers_for_empty_window(ctx)]
    shrink = (
        "so also shrink the runtime peak (next action)"
        if chunked_lever(ctx) is not None
        else "so keep batches small until a durable fix is in"
    )
    unknown = (
        " If the fraction was already this high, the fraction is not the fix: use the durable ones."
        if b.mem_fraction_static is None
        else ""
    )
    return [
        Action(
            text=f"{head} To start now, set {FLAG} {_fmt_y(rec)} (today {_fmt_y(b.mem_fraction_static)}): "
            f"the KV pool gets {kv:.2f} GiB{_tokens(ctx, kv)}, but only {dynamic:.2f} GiB is left "
            f"for activations, less than the {targets.dynamic_at(b.window.high, b.pre_gib):.2f} GiB "
            f"that y ≤ {b.window.high:.3f} leaves, {shrink}. "
            f"Durable fixes follow.{unknown}",
            flag=FLAG,
            direction="raise",
            value=rec,
            current=b.mem_fraction_static,
            basis=f"y_min {y_min:.3f} + 0.01; dynamic share (1 − {rec:.2f})·{b.pre_gib:.2f}",
        ),
        *_start_now_levers(ctx),
    ]


def _start_now_levers(ctx: Context) -> list[Action]:
    """The runtime lever first (it makes the tight start safe), then the durable ones."""
    lever = chunked_lever(ctx)
    rest = [a for a in levers_for_empty_window(ctx) if a.flag != "--chunked-prefill-size"]
    return ([lever[1]] if lever else []) + rest


def _suggested_minimum(ctx: Context) -> float | None:
    for failure in ctx.incident.failures:
        s = failure.data.get("suggested")
        if isinstance(s, float):
            return s
    return None


def weights_do_not_fit(ctx: Context) -> list[Action]:
    b = ctx.sglang
    oom = ctx.primary.oom if ctx.primary else None
    loaded = oom.allocated_gib if oom and oom.allocated_gib is not None else None
    head = "The weights themselves do not fit"
    if loaded is not None and b.pre_gib is not None:
        head += f": {loaded:.2f} GiB were loaded when {b.pre_gib:.2f} GiB free ran out"
    elif loaded is not None and oom is not None and oom.total_gib is not None:
        left = f" with {oom.free_gib:.2f} GiB free" if oom.free_gib is not None else ""
        head += f": {loaded:.2f} GiB were loaded on the {oom.total_gib:.2f} GiB card{left}"
    out = [
        Action(
            text=head + ". --mem-fraction-static is irrelevant here (it only sizes the KV pool "
            "after loading); reduce the weights per GPU:"
        )
    ]
    doubled, value, tp = double_tp(ctx)
    out.append(
        Action(
            text=f"Shard over more GPUs: {doubled} halves the weights per GPU.",
            flag="--tp-size",
            direction="raise",
            value=value,
            current=tp,
        )
    )
    out.append(
        Action(text="Load quantised weights (an FP8/AWQ/GPTQ checkpoint or --quantization fp8).")
    )
    out.append(Action(text="Free the GPU of other processes, or use a card with more memory."))
    return out


def lower_action(ctx: Context, why: str, flag: str = FLAG) -> list[Action]:
    """Lower the fraction by what the failed allocation proves is missing, plus the margin."""
    b = ctx.sglang
    y, pre = b.mem_fraction_static, b.pre_gib
    short = ctx.shortfall
    margin = ctx.margin()
    if y is None or pre is None:
        return [
            Action(
                text=f"Lower {flag} to give {why} "
                + (
                    f"at least {size(short + margin)} more ({size(short)} short + "
                    f"{size(margin)} margin: more allocations follow the failed one)"
                    if short is not None
                    else "more room"
                )
                + "; without server_args it cannot be computed.",
                flag=flag,
                direction="lower",
                current=y,
            )
        ]
    move = targets.lower_y(b, short, margin)
    if short is None:
        basis = f"no allocation size in the log: one {targets.BLIND_STEP:.2f} step"
        lead = (
            "The log does not say how much was missing, so take one step of about "
            f"{targets.BLIND_STEP:.2f}"
        )
    else:
        basis = (
            f"y − (requested − free + margin)/pre = {y:.3f} − ({short:.3f} + {margin:.2f})/"
            f"{pre:.2f}; margin = max(1 GiB, 10% of the dynamic share)"
        )
        lead = (
            f"The dynamic share needs ≥ {size(short)} more (requested − free) plus a "
            f"{size(margin)} margin"
        )
    if move.capped_from is not None:
        lead += (
            f"; that alone would allow {_fmt_y(move.capped_from)}, but the window's upper bound is "
            f"{b.window.high:.3f} ({b.window.high_basis})"
        )
    if move.value is None:
        return [
            Action(
                text=f"{lead}, but lowering {flag} below {move.floor:.3f} empties the KV pool "
                f"({b.window.low_basis}). No fraction both starts and runs: use the levers below.",
            )
        ]
    rec = move.value
    if move.floor_stopped:
        lead += (
            f"; the KV floor ({move.floor:.3f}) stops the fraction at {_fmt_y(rec)}, so also use "
            "a lever below"
        )
    kv = move.kv_gib
    kv_text = f"; the KV pool becomes {kv:.2f} GiB{_tokens(ctx, kv)}" if kv is not None else ""
    return [
        Action(
            text=f"{lead}: set {flag} {_fmt_y(rec)} (today {_fmt_y(y)}), giving {why} "
            f"{move.dynamic_gib:.2f} GiB instead of {move.dynamic_now_gib:.2f} GiB{kv_text}.",
            flag=flag,
            direction="lower",
            value=rec,
            current=y,
            basis=basis,
        )
    ]


def lower_fraction(ctx: Context) -> list[Action]:
    if ctx.primary is not None and ctx.primary.site == "kv_pool":
        # the pool itself was too big for what was free: it shrinks with y (or a token cap)
        return [
            *lower_action(ctx, "the KV pool less and the rest of the card"),
            Action(
                text="Or cap the pool directly with --max-total-tokens (it is sized from the "
                "fraction otherwise).",
                alternative=True,
            ),
        ]
    levers = runtime_levers(ctx)
    cheap = fragmentation_fix(ctx)
    first = [cheap] if cheap is not None else []
    if serving_logprobs(ctx):
        # Logprob memory grows with tokens per batch; a smaller fraction alone rarely fixes it.
        return first + levers + lower_action(ctx, "activations")
    return first + lower_action(ctx, "activations") + levers


def graph_capture(ctx: Context) -> list[Action]:
    prefill = bool(ctx.primary and "prefill" in ctx.primary.message.lower())
    flag = ctx.graph_bs_flag(prefill)
    bs = ctx.incident.facts_of("capture_progress")
    last_bs = next((int(f.num("bs") or 0) for f in reversed(bs) if f.num("bs")), None)
    current = ctx.graph_max_bs()
    base = last_bs or current
    out = lower_action(ctx, "CUDA graphs and activations")
    if base:
        out.append(
            Action(
                text=f"Lower {flag} to {max(base // 2, 1)}"
                + (f" (capture ran out at bs={last_bs})" if last_bs else "")
                + f"{ctx.graph_bs_note()}: graph memory grows with the largest captured batch.",
                flag=flag,
                direction="lower",
                value=max(base // 2, 1),
                current=current,
            )
        )
    else:
        out.append(
            Action(
                text=f"Lower {flag} (e.g. 16 as SGLang suggests){ctx.graph_bs_note()}: graph memory "
                "grows with the largest captured batch.",
                flag=flag,
                direction="lower",
                value=16,
                current=current,
            )
        )
    return out


def reserve_encoder(ctx: Context) -> list[Action]:
    """Encoders need room outside the static share: lower the fraction, and shrink inputs."""
    out: list[Action] = []
    if ctx.incident.engine == "sglang-omni":
        from oomdoctor.advice import omni

        sibling = omni.busiest_sibling(ctx)
        if sibling is not None and sibling[0] != "thinker":
            out.extend(omni.stage_fraction_action(ctx, *sibling))
        else:
            # The encoder stages share the thinker's GPU; its flag sizes the thinker's pool.
            thinker = "--thinker.engine.mem_fraction_static"
            out.extend(lower_action(ctx, "the encoder stages on this GPU", flag=thinker))
            zero = ctx.features.get("omni.encoder_reserve_zero")
            if zero is not None and zero.value:
                out.append(omni.encoder_reserve(ctx))
    else:
        out.extend(lower_action(ctx, "the vision/audio encoder"))
    out.extend(encoder_input_levers(ctx))
    return out
