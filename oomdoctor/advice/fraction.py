"""Advice that moves --mem-fraction-static (and the levers beside it), with the arithmetic shown."""

from __future__ import annotations

from oomdoctor.advice.context import RAISE_MARGIN, Context
from oomdoctor.budget.formulas import GIB, kv_at, round_down, round_up
from oomdoctor.incident.versions import at_least
from oomdoctor.model import Action
from oomdoctor.units import size

FLAG = "--mem-fraction-static"
#: Below this dynamic share a server cannot run at all (graphs, NCCL, cuBLAS, a single batch).
HARD_DYNAMIC_FLOOR_GIB = 2.0


def _fmt_y(y: float | None) -> str:
    return "unknown" if y is None else f"{y:.2f}" if round(y, 2) == round(y, 4) else f"{y:.3f}"


def _tokens(ctx: Context, kv_gib: float) -> str:
    bpt = ctx.sglang.bytes_per_token
    if bpt is None or kv_gib <= 0:
        return ""
    return f" (≈{int(kv_gib * GIB // bpt):,} tokens at {bpt:,} B/token)"


def _window(ctx: Context) -> str:
    b = ctx.sglang
    if b.window.low is None or b.window.high is None:
        return ""
    return f" The workable window is {b.window.low:.3f}–{b.window.high:.3f}."


def chunked_lever(ctx: Context) -> tuple[float, Action] | None:
    """Halving --chunked-prefill-size: SGLang budgets 1.5 MiB of activations per prefill token."""
    chunk = ctx.arg_int("chunked_prefill_size")
    if not chunk or chunk <= 1024:
        return None
    new = chunk // 2
    gib = 1.5 * (chunk - new) / 1024
    return gib, Action(
        text=f"Halve --chunked-prefill-size ({chunk} → {new}): the runtime peak falls by "
        f"≈{gib:.1f} GiB (SGLang budgets 1.5 MiB per prefill token).",
        flag="--chunked-prefill-size",
        direction="lower",
        value=new,
        current=chunk,
    )


def levers_for_empty_window(ctx: Context) -> list[Action]:
    """What moves the bounds when no fraction works, ranked by how many GiB they free."""
    b = ctx.sglang
    ranked: list[tuple[float, Action]] = []
    weights = b.weights_gib
    tp = ctx.arg_int("tp_size") or 1
    if weights is not None:
        ranked.append(
            (
                weights / 2,
                Action(
                    text=f"Double tensor parallelism (--tp-size {tp * 2}): weights per GPU fall from "
                    f"{weights:.2f} to ≈{weights / 2:.2f} GiB, freeing ≈{weights / 2:.2f} GiB per GPU.",
                    flag="--tp-size",
                    direction="raise",
                    value=tp * 2,
                    current=tp,
                ),
            )
        )
        ranked.append(
            (
                weights / 2 - 0.01,
                Action(
                    text="Quantised weights (an FP8 checkpoint or --quantization fp8) halve bf16 "
                    f"weights: ≈{weights / 2:.2f} GiB freed per GPU.",
                ),
            )
        )
    need = (b.context_len or 0) * (b.bytes_per_token or 0) / GIB
    if need > 0 and b.bytes_per_token:
        ranked.append(
            (
                need / 2,
                Action(
                    text="An FP8 KV cache (--kv-cache-dtype fp8_e4m3) halves bytes per token "
                    f"({b.bytes_per_token:,} → {b.bytes_per_token // 2:,}): one full-context request "
                    f"needs {need / 2:.2f} GiB less.",
                    flag="--kv-cache-dtype",
                    direction="set",
                    value="fp8_e4m3",
                ),
            )
        )
    lever = chunked_lever(ctx)
    if lever is not None:
        ranked.append(lever)
    ranked.sort(key=lambda item: -item[0])
    return [a for _, a in ranked] + [
        Action(text="A card with more memory (the same flags then fit).")
    ]


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
            )
        ]
    pre, post = b.pre_gib, b.post_gib
    y_min = b.window.low if b.window.low is not None else b.y_zero
    if b.window.empty:
        return _raise_into_empty_window(ctx, y_min)
    # The middle of the window leaves room for both the pool and activations; without an upper
    # bound, a small step above the smallest workable value.
    rec = round_up(y_min + RAISE_MARGIN)
    if b.window.high is not None:
        rec = max(rec, round((y_min + b.window.high) / 2, 2))
    suggested = _suggested_minimum(ctx)
    if suggested is not None:
        rec = max(rec, round_up(suggested + 0.005))
    if b.window.high is not None and rec > b.window.high:
        rec = round_down(b.window.high, 0.005)
    kv = kv_at(rec, pre, post) - b.kv_reserve_gib
    basis = (
        f"KV(y) = post − (1 − y)·pre = {post:.2f} − (1 − y)·{pre:.2f}; empty at y = 1 − post/pre = "
        f"{b.y_zero:.3f}; y_min {y_min:.3f} ({b.window.low_basis}); the value sits mid-window "
        f"(at least y_min + {RAISE_MARGIN:.2f})"
    )
    actions = [
        Action(
            text=f"Set {FLAG} {_fmt_y(rec)} (today {_fmt_y(y)}). The KV pool is empty below "
            f"{b.y_zero:.3f} (= 1 − {post:.2f}/{pre:.2f}); at {_fmt_y(rec)} it gets {kv:.2f} GiB"
            f"{_tokens(ctx, kv)} and leaves {(1 - rec) * pre:.2f} GiB for activations."
            + _window(ctx),
            flag=FLAG,
            direction="raise",
            value=rec,
            current=y,
            basis=basis,
        )
    ]
    if y is not None and y >= rec:
        actions[0] = Action(
            text=f"The log's numbers say {FLAG} {_fmt_y(y)} should already leave a KV pool "
            f"(empty only below {b.y_zero:.3f}), yet SGLang found none: another pool (SWA, mamba "
            "state, a draft model) or a rank with less free memory took it. Raise the fraction "
            f"to {_fmt_y(min(rec + 0.03, b.window.high or 0.99))} and check every rank's `avail mem`.",
            flag=FLAG,
            direction="raise",
            value=round_up(min(rec + 0.03, b.window.high or 0.99)),
            current=y,
            basis=basis,
        )
    share = (b.weights_gib or 0.0) / pre
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
    pre, post = b.pre_gib, b.post_gib
    suggested = _suggested_minimum(ctx)
    rec = round_up(max(y_min + 0.01, (suggested or 0.0) + 0.005))
    dynamic = (1 - rec) * pre
    floor = max(HARD_DYNAMIC_FLOOR_GIB, 0.03 * pre, (b.graph_gib or 0.0) + 1.0)
    head = (
        f"No value of {FLAG} fits both bounds with today's other flags: the KV pool needs "
        f"y ≥ {y_min:.3f} ({b.window.low_basis}) but the runtime reserve needs y ≤ {b.window.high:.3f} "
        f"({b.window.high_basis})."
    )
    if rec >= 0.99 or dynamic < floor:
        return [Action(text=head + " Change what moves the bounds:"), *levers_for_empty_window(ctx)]
    kv = kv_at(rec, pre, post) - b.kv_reserve_gib
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
            f"for activations, less than the {b.reserve_gib or 0:.2f} GiB planned, {shrink}. "
            f"Durable fixes follow.{unknown}",
            flag=FLAG,
            direction="raise",
            value=rec,
            current=b.mem_fraction_static,
            basis=f"y_min {y_min:.3f} + 0.01; dynamic share (1 − {rec:.2f})·{pre:.2f}",
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
    free = b.pre_gib if b.pre_gib is not None else (oom.total_gib if oom else None)
    head = "The weights themselves do not fit"
    if loaded is not None and free is not None:
        head += f": {loaded:.2f} GiB were loaded when {free:.2f} GiB free ran out"
    out = [
        Action(
            text=head + ". --mem-fraction-static is irrelevant here (it only sizes the KV pool "
            "after loading); reduce the weights per GPU:"
        )
    ]
    tp = ctx.arg_int("tp_size") or 1
    out.append(
        Action(
            text=f"Shard over more GPUs: --tp-size {tp * 2} halves the weights per GPU.",
            flag="--tp-size",
            direction="raise",
            value=tp * 2,
            current=tp,
        )
    )
    out.append(
        Action(text="Load quantised weights (an FP8/AWQ/GPTQ checkpoint or --quantization fp8).")
    )
    out.append(Action(text="Free the GPU of other processes, or use a card with more memory."))
    return out


def _shortfall(ctx: Context) -> float | None:
    oom = ctx.primary.oom if ctx.primary else None
    if oom is None or oom.requested_gib is None or oom.free_gib is None:
        return None
    return max(oom.requested_gib - oom.free_gib, 0.0)


def lower_action(ctx: Context, why: str, flag: str = FLAG) -> list[Action]:
    """Lower the fraction by what the failed allocation proves is missing, plus the margin."""
    b = ctx.sglang
    y, pre = b.mem_fraction_static, b.pre_gib
    short = _shortfall(ctx)
    if y is None or pre is None:
        return [
            Action(
                text=f"Lower {flag} to give {why} more room"
                + (f" (at least {size(short + ctx.margin())} more)" if short is not None else "")
                + ". The log lacks server_args or the `Load weight begin` line, so the value "
                "cannot be computed from it.",
                flag=flag,
                direction="lower",
                current=y,
            )
        ]
    if short is None:
        rec = round_down(y - 0.05)
        basis = "no allocation size in the log: one 0.05 step"
        grow = 0.05 * pre
        lead = f"The log does not say how much was missing; a 0.05 step gives {why} {grow:.2f} GiB more"
    else:
        need = short + ctx.margin()
        rec = round_down(y - need / pre)
        basis = (
            f"y − (requested − free + margin)/pre = {y:.3f} − ({short:.3f} + {ctx.margin():.2f})/"
            f"{pre:.2f}; margin = max(1 GiB, 10% of the dynamic share)"
        )
        lead = (
            f"The dynamic share needs ≥ {size(short)} more (requested − free) plus a "
            f"{size(ctx.margin())} margin"
        )
    if b.window.high is not None and rec > b.window.high:
        # The failed allocation alone allows more, but the runtime reserve SGLang plans for this
        # card (the window's upper bound) does not: stay inside the window.
        lead += (
            f"; that alone would allow {_fmt_y(rec)}, but the window's upper bound is "
            f"{b.window.high:.3f} ({b.window.high_basis})"
        )
        rec = round_down(b.window.high)
    floor = b.window.low if b.window.low is not None else b.y_zero
    if floor is not None and rec < floor:
        ok_floor = round_up(floor)
        if ok_floor < y:
            rec = ok_floor
            lead += f"; the KV floor ({floor:.3f}) stops the fraction at {_fmt_y(rec)}, so also use a lever below"
        else:
            return [
                Action(
                    text=f"{lead}, but lowering {flag} below {floor:.3f} empties the KV pool "
                    f"({b.window.low_basis}). No fraction both starts and runs: use the levers below.",
                )
            ]
    kv = kv_at(rec, pre, b.post_gib) - b.kv_reserve_gib if b.post_gib is not None else None
    kv_text = f"; the KV pool becomes {kv:.2f} GiB{_tokens(ctx, kv)}" if kv is not None else ""
    return [
        Action(
            text=f"{lead}: set {flag} {_fmt_y(rec)} (today {_fmt_y(y)}), giving {why} "
            f"{(1 - rec) * pre:.2f} GiB instead of {(1 - y) * pre:.2f} GiB{kv_text}.",
            flag=flag,
            direction="lower",
            value=rec,
            current=y,
            basis=basis,
        )
    ]


def _batch_kind(ctx: Context) -> str | None:
    """Prefill or decode: from the traceback (forward_extend / forward_decode), else from the
    stats line printed last before the failure."""
    frames = ctx.primary.frames if ctx.primary else ()
    funcs = {f.func for f in frames}
    if funcs & {"forward_extend", "forward_prefill", "forward_split_prefill"}:
        return "prefill"
    if funcs & {"forward_decode", "forward_idle"}:
        return "decode"
    stats = ctx.incident.stats
    before = [
        s
        for s in (stats.last_prefill, stats.last_decode)
        if s is not None and (ctx.primary is None or s.line.seq < ctx.primary.line.seq)
    ]
    if not before:
        return None
    return str(max(before, key=lambda s: s.line.seq).data.get("phase"))


def runtime_levers(ctx: Context) -> list[Action]:
    """Flags that shrink the runtime peak without touching the KV pool."""
    out: list[Action] = []
    site = ctx.primary.site if ctx.primary else "unknown"
    stats = ctx.incident.stats
    batch = _batch_kind(ctx)
    last = stats.last_decode if batch == "decode" else stats.last_prefill
    chunk = ctx.arg_int("chunked_prefill_size")
    decode_heavy = batch == "decode"
    if site in ("forward", "logits", "unknown", "encoder") and not decode_heavy:
        if chunk and chunk > 0:
            new = max(chunk // 2, 512)
            seen = stats.last_prefill.num("new_token") if stats.last_prefill else None
            seen_text = f"; the last prefill batch had {int(seen):,} new tokens" if seen else ""
            out.append(
                Action(
                    text=f"Halve --chunked-prefill-size ({chunk} → {new}): prefill activations and "
                    f"logits grow linearly with the tokens of a prefill batch, so this roughly "
                    f"halves the prefill peak{seen_text}.",
                    flag="--chunked-prefill-size",
                    direction="lower",
                    value=new,
                    current=chunk,
                )
            )
        else:
            out.append(
                Action(
                    text="Set --chunked-prefill-size 4096 (or lower): prefill activations scale with "
                    "tokens per batch.",
                    flag="--chunked-prefill-size",
                    direction="set",
                    value=4096,
                )
            )
    running = last.num("running_req") if last is not None else None
    current_max = ctx.arg_int("max_running_requests")
    if decode_heavy or site in ("sampling",):
        base = int(running) if running else current_max
        if base:
            new = max(base * 3 // 4, 1)
            out.append(
                Action(
                    text=f"Cap --max-running-requests at {new} (the last decode batch ran {base}): "
                    "decode activations and sampling buffers scale with batch size.",
                    flag="--max-running-requests",
                    direction="lower",
                    value=new,
                    current=current_max,
                )
            )
    if _serving_logprobs(ctx):
        out.append(
            Action(
                text="The allocation was in the logits processor: requests with logprobs over long "
                "prompts (return_logprob with an early logprob_start_len) materialise "
                "tokens × vocabulary floats; limit them or use an SGLang release that chunks "
                "logprob computation."
            )
        )
    oom = ctx.primary.oom if ctx.primary else None
    short = _shortfall(ctx)
    unallocated = oom.reserved_unallocated_gib if oom else None
    if unallocated is not None and short is not None and unallocated >= max(short, 0.5):
        out.append(
            Action(
                text=f"{size(unallocated)} was reserved by PyTorch but unallocated "
                f"(fragmentation) — more than the {size(short)} missing: set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
            )
        )
    return out


def _serving_logprobs(ctx: Context) -> bool:
    """A logits-processor OOM while serving, with a dynamic share that is not starved.

    (A warmup or startup forward also runs the logits processor; there the fraction is the cause.)
    """
    p, b = ctx.primary, ctx.sglang
    if p is None or p.site != "logits" or p.phase not in ("running", "unknown"):
        return False
    return b.dynamic_gib is None or b.pre_gib is None or b.dynamic_gib >= 0.08 * b.pre_gib


def lower_fraction(ctx: Context) -> list[Action]:
    levers = runtime_levers(ctx)
    if _serving_logprobs(ctx):
        # Logprob memory grows with tokens per batch; a smaller fraction alone rarely fixes it.
        return levers + lower_action(ctx, "activations")
    return lower_action(ctx, "activations") + levers


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
    out.extend(_encoder_input_levers(ctx))
    return out


def _encoder_input_levers(ctx: Context) -> list[Action]:
    """Smaller encoder inputs, with the knobs the log's SGLang version has."""
    out: list[Action] = []
    if ctx.incident.engine == "sglang-omni":
        out.append(
            Action(
                text="Shrink encoder inputs: shorter audio clips and fewer/smaller images or "
                "video frames per request (the stages' processor limits), or lower the encoder "
                "stages' batch size (--<stage>.factory.max_batch_size).",
            )
        )
        return out
    if at_least(ctx.incident.version, "0.5.10"):
        out.append(
            Action(
                text="Fewer items per request: --limit-mm-data-per-request "
                '\'{"image": N, "video": M}\' (SGLang refuses requests over the limit).',
                flag="--limit-mm-data-per-request",
                direction="set",
            )
        )
        out.append(
            Action(
                text="Smaller items: SGLANG_IMAGE_MAX_PIXELS (Qwen-VL family; default "
                "16384·28·28 = 12,845,056 pixels per image) and --mm-process-config "
                '\'{"video": {"max_frames": N, "max_pixels": P}}\' for videos.',
            )
        )
    else:
        out.append(
            Action(
                text="Smaller and fewer encoder inputs per request: resize images on the client, "
                "send fewer images/frames per prompt, and cap video size with the VIDEO_MAX_PIXELS "
                "environment variable (Qwen-VL processors); --limit-mm-data-per-request exists "
                "from SGLang 0.5.10 on.",
            )
        )
    chunked = ctx.arg_int("chunked_prefill_size")
    if chunked is not None and chunked <= 0:
        out.append(
            Action(
                text="Enable chunked prefill (--chunked-prefill-size 8192; it is -1 today): the "
                "encoder then runs on the items of one chunk at a time instead of the whole "
                "prompt.",
                flag="--chunked-prefill-size",
                direction="set",
                value=8192,
                current=chunked,
            )
        )
    return out
