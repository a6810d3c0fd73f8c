"""SGLang's levers beside the fraction: what shrinks the runtime peak (chunked prefill, running
requests, fragmentation), what moves the window's bounds when none fits (TP, quantisation, an
FP8 KV cache), and smaller encoder inputs, with the knobs of the log's SGLang version."""

from __future__ import annotations

from oomdoctor.advice.context import Context
from oomdoctor.budget.targets import chunk_saving_gib, kv_for_tokens
from oomdoctor.incident.versions import at_least
from oomdoctor.model import Action
from oomdoctor.units import size


def chunked_lever(ctx: Context) -> tuple[float, Action] | None:
    """Halving --chunked-prefill-size: SGLang budgets 1.5 MiB of activations per prefill token."""
    chunk = ctx.arg_int("chunked_prefill_size")
    if not chunk or chunk <= 1024:
        return None
    new = chunk // 2
    gib = chunk_saving_gib(chunk, new)
    return gib, Action(
        text=f"Halve --chunked-prefill-size ({chunk} → {new}): the runtime peak falls by "
        f"≈{gib:.1f} GiB (SGLang budgets 1.5 MiB per prefill token).",
        flag="--chunked-prefill-size",
        direction="lower",
        value=new,
        current=chunk,
    )


def double_tp(ctx: Context) -> tuple[str, int | None, int | None]:
    """`--tp-size 2N`, its value and today's N; when the log does not show N (no server_args,
    no rank tags), "twice today's --tp-size" and no value: never a guess of 1."""
    tp = ctx.arg_int("tp_size")
    if tp is None:
        return "twice today's --tp-size", None, None
    return f"--tp-size {tp * 2}", tp * 2, tp


def levers_for_empty_window(ctx: Context) -> list[Action]:
    """What moves the bounds when no fraction works, ranked by how many GiB they free."""
    b = ctx.sglang
    ranked: list[tuple[float, Action]] = []
    weights = b.weights_gib
    if weights is not None:
        doubled, value, tp = double_tp(ctx)
        ranked.append(
            (
                weights / 2,
                Action(
                    text=f"Double tensor parallelism ({doubled}): weights per GPU fall from "
                    f"{weights:.2f} to ≈{weights / 2:.2f} GiB, freeing ≈{weights / 2:.2f} GiB per GPU.",
                    flag="--tp-size",
                    direction="raise",
                    value=value,
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
    need = kv_for_tokens(b.context_len or 0, b.bytes_per_token or 0)
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
    if serving_logprobs(ctx):
        out.append(
            Action(
                text="Logprobs over long prompts (return_logprob with an early "
                "logprob_start_len) make the logits processor hold tokens × vocabulary floats: "
                "limit them, or use an SGLang release that chunks them."
            )
        )
    return out


#: Fragmentation is the fix only when the reserved-but-unallocated memory covers the missing
#: bytes with at least this much to spare (a little of it is always in use by rounding).
FRAGMENTATION_MIN_GIB = 0.5


def fragmentation_fix(ctx: Context) -> Action | None:
    """expandable_segments, when PyTorch's own unallocated reserve covers what was missing: the
    cheapest fix, with no memory flag changed (the allocator maps the free pieces together)."""
    oom = ctx.primary.oom if ctx.primary else None
    short = ctx.shortfall
    if oom is None or short is None or oom.reserved_unallocated_gib is None:
        return None
    unallocated = oom.reserved_unallocated_gib
    if unallocated < max(short, FRAGMENTATION_MIN_GIB):
        return None
    sums = (
        f" ({oom.free_gib:.2f} + {unallocated:.2f} ≥ {oom.requested_gib:.2f} GiB)"
        if oom.free_gib is not None and oom.requested_gib is not None
        else ""
    )
    return Action(
        text="First, the cheapest: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; PyTorch "
        f"held {size(unallocated)} reserved but unallocated, more than the {size(short)} "
        f"short{sums}.",
        flag="PYTORCH_CUDA_ALLOC_CONF",
        direction="set",
        value="expandable_segments:True",
    )


def serving_logprobs(ctx: Context) -> bool:
    """A logits-processor OOM while serving, with a dynamic share that is not starved.

    (A warmup or startup forward also runs the logits processor; there the fraction is the cause.)
    """
    p, b = ctx.primary, ctx.sglang
    if p is None or p.site != "logits" or p.phase not in ("running", "unknown"):
        return False
    return b.dynamic_gib is None or b.pre_gib is None or b.dynamic_gib >= 0.08 * b.pre_gib


def encoder_input_levers(ctx: Context) -> list[Action]:
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
