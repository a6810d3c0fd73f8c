"""Advice that is not about the fraction first: co-tenants, KV slots, retraction, host, faults."""

from __future__ import annotations

from oomdoctor.advice.context import Context, halve
from oomdoctor.advice.holders import message_holders, snapshot_holders
from oomdoctor.advice.sglang_fraction import lower_action, raise_fraction
from oomdoctor.budget import targets
from oomdoctor.model import Action, number

#: Above this many retractions an hour the pool is too small for the load, not just busy.
FREQUENT_RETRACTIONS_PER_HOUR = 30.0


def free_gpu(ctx: Context) -> list[Action]:
    """Name the co-tenants and their cost; then how to size the server if they must stay."""
    primary = ctx.primary
    if primary is not None and primary.kind == "stage_load_negative":
        from oomdoctor.advice import omni

        return omni.stage_load_negative(ctx)
    out = snapshot_holders(ctx) or message_holders(ctx)
    y = ctx.sglang.mem_fraction_static
    if primary is not None and primary.kind == "tp_imbalance":
        out.append(_imbalance(ctx))
    rl = ctx.features.get("rl.colocated")
    if rl is not None and rl.value:
        out.append(
            Action(
                text="RL colocation: the trainer and the rollout server share the GPU. Release the "
                "trainer's memory before rollout (offload, or SGLang's memory saver with "
                f"torch_memory_saver) and size {ctx.fraction_flag} for what is left while both "
                "are resident.",
            )
        )
    if not out:
        out.append(
            Action(
                text="Another process holds memory on this server's GPUs: free them "
                "(nvidia-smi shows who), then restart."
            )
        )
    if primary is not None and y is not None:
        startup = primary.kind in ("startup_kv_error", "negative_profile")
        sized = raise_fraction(ctx) if startup else lower_action(ctx, "activations next to it")
        if sized and sized[0].flag:
            first = sized[0]  # a fallback instead of freeing the GPU, never fix 1
            out.append(
                first._replace(
                    text="If the other process must stay — " + first.text, alternative=True
                )
            )
    return out


def _imbalance(ctx: Context) -> Action:
    primary = ctx.primary
    y = ctx.sglang.mem_fraction_static
    low = primary.data.get("min") if primary else None
    local = primary.data.get("local") if primary else None
    if not (isinstance(low, float) and isinstance(local, float)):
        return Action(
            text="Some GPU of this server is partly occupied by another process: free it "
            "(nvidia-smi) or pick other GPUs (CUDA_VISIBLE_DEVICES)."
        )
    gap = local - low
    cost = f"; the whole server loses ≈{y * gap:.2f} GiB of KV per GPU" if y else ""
    rank = ctx.sglang.rank
    which = f"The GPU of {rank}" if rank else "One GPU"
    return Action(
        text=f"{which} has {gap:.2f} GiB less free memory than the others ({low:.2f} vs "
        f"{local:.2f} GiB): another process holds it. SGLang sizes every rank by the tightest "
        f"GPU{cost}. Free that GPU (nvidia-smi), or pick other GPUs (CUDA_VISIBLE_DEVICES / "
        "--base-gpu-id).",
    )


def kv_slots(ctx: Context) -> list[Action]:
    primary = ctx.primary
    from oomdoctor.advice import sglang_legacy_slots as legacy

    if legacy.is_legacy(primary):
        return legacy.actions(ctx)
    data = primary.data if primary else {}
    need, avail = data.get("need"), data.get("available")
    out: list[Action] = []
    if isinstance(need, int) and isinstance(avail, int) and avail >= need:
        out.append(
            Action(
                text=f"Not a GPU OOM: the scheduler's KV-slot accounting failed to allocate {need} "
                f"tokens while {avail} were available — an SGLang allocator bug (with --page-size > 1 "
                "it was fixed by PR #4913, 'Fix oom error for large page size'). Upgrade SGLang; "
                "until then --page-size 1 avoids it.",
            )
        )
    else:
        text = "Not a GPU OOM: the KV pool ran out of token slots for the admitted batch"
        if isinstance(need, int) and isinstance(avail, int):
            text += f" ({need} tokens needed, {avail} available)"
        out.append(Action(text=text + "."))
        running = ctx.arg_int("max_running_requests")
        if running:
            out.append(
                halve(
                    "--max-running-requests", running, "admission then leaves slots for decoding."
                )
            )
        out.append(
            Action(
                alternative=True,
                text="Or give the pool more tokens (raise --mem-fraction-static if the "
                "activation headroom allows).",
            )
        )
    return out


def retraction(ctx: Context) -> list[Action]:
    """KV-slot pressure while serving: how often, how full, and how far the pool can grow."""
    stats = ctx.incident.stats
    t = stats.timeline
    per_hour = t.retractions_per_hour
    peak = stats.peak_token_usage
    bits = []
    if stats.retractions:
        bits.append(
            f"SGLang retracted requests {stats.retractions} time(s)"
            + (f" ({per_hour:.0f}/hour)" if per_hour is not None else "")
        )
    if t.seconds_high >= 60:
        bits.append(f"token usage sat at ≥ 0.95 for {t.seconds_high / 60:.0f} min")
    if peak is not None:
        bits.append(f"peaking at {peak:.2f}")
    span = f" over {t.span_s / 3600:.1f} h of stats" if t.span_s and t.span_s >= 600 else ""
    text = (
        "Not a crash: "
        + ", ".join(bits or ["the KV pool filled"])
        + span
        + (". Retracted requests are re-queued and recomputed; occasional retraction is normal.")
    )
    out = [Action(text=text)]
    pressured = (
        (per_hour is not None and per_hour >= FREQUENT_RETRACTIONS_PER_HOUR)
        or stats.retractions >= 20
        or t.seconds_high >= 600
    )
    if pressured:
        out.extend(_pressure_levers(ctx))
    return out


def _pressure_levers(ctx: Context) -> list[Action]:
    """SGLang's own knob first (admit less), then fewer requests, smaller tokens, a bigger pool."""
    out = [
        Action(
            text="It is frequent: set --schedule-conservativeness 1.3 (default 1.0) so the scheduler "
            "admits new requests more cautiously and retracts less (SGLang's documented remedy).",
            flag="--schedule-conservativeness",
            direction="raise",
            value=1.3,
            current=number(ctx.incident.server_args.get("schedule_conservativeness")),
        )
    ]
    running = ctx.arg_int("max_running_requests")
    if running:
        out.append(
            Action(
                text=f"Lower --max-running-requests ({running} → {max(running * 3 // 4, 1)}) so "
                "fewer requests share the pool.",
                flag="--max-running-requests",
                direction="lower",
                value=max(running * 3 // 4, 1),
                current=running,
            )
        )
    b = ctx.sglang
    kv_dtype = ctx.incident.server_args.get("kv_cache_dtype")
    if b.bytes_per_token and kv_dtype in (None, "auto"):
        tokens = f" ({b.kv_tokens:,} → ≈{b.kv_tokens * 2:,} tokens)" if b.kv_tokens else ""
        out.append(
            Action(
                text=f"An FP8 KV cache (--kv-cache-dtype fp8_e4m3) halves bytes per token "
                f"({b.bytes_per_token:,} → {b.bytes_per_token // 2:,}), doubling the pool{tokens}.",
                flag="--kv-cache-dtype",
                direction="set",
                value="fp8_e4m3",
                current=kv_dtype,
            )
        )
    grow = _grow_pool(ctx)
    if grow is not None:
        out.append(grow)
    return out


def _grow_pool(ctx: Context) -> Action | None:
    """Raise the fraction into the runtime headroom, keeping a spare part of it free."""
    b = ctx.sglang
    grow = targets.grow_into_headroom(b)
    if grow is None or b.headroom_gib is None or b.mem_fraction_static is None:
        return None
    dy, gained, spare = grow
    tokens = (
        f" (+{targets.tokens_in(gained, b.bytes_per_token):,} tokens)" if b.bytes_per_token else ""
    )
    y = b.mem_fraction_static
    return Action(
        alternative=True,
        text=f"Or grow the pool into the runtime headroom: +{dy:.2f} on --mem-fraction-static "
        f"({y:.2f} → {y + dy:.2f}) gives +{gained:.2f} GiB of KV{tokens} and still leaves "
        f"{b.headroom_gib - gained:.2f} GiB of the {b.headroom_gib:.2f} GiB that were free after "
        "startup (that figure predates the load: watch for activation OOMs).",
        flag="--mem-fraction-static",
        direction="raise",
        value=round(y + dy, 2),
        current=y,
        basis=f"headroom after startup {b.headroom_gib:.2f} GiB − {spare:.2f} GiB kept free "
        f"(max(2 GiB, half)); Δy = min(0.10, that / pre {b.pre_gib:.2f})",
    )


def oversized(ctx: Context) -> list[Action]:
    """One allocation larger than the whole card: no fraction can fit it; shrink what sized it."""
    oom = ctx.primary.oom if ctx.primary else None
    asked = f" of {oom.requested_gib:.2f} GiB" if oom and oom.requested_gib else ""
    card = f"whole {oom.total_gib:.2f} GiB card" if oom and oom.total_gib else "whole card"
    fit = ctx.oom.fit if ctx.oom is not None else None
    weights = ctx.budget.weights_gib
    if fit is not None and fit.value == "not_beside_weights" and oom and oom.total_gib and weights:
        card = (
            f"{oom.total_gib - weights:.2f} GiB the card leaves beside the {weights:.2f} GiB of "
            "weights"
        )
    out = [
        Action(
            text=f"No value of {ctx.fraction_flag} can fit this: the single allocation{asked} "
            f"is larger than the {card}. Shrink what sized it instead."
        )
    ]
    vllm = ctx.family == "vllm"
    # the length in effect: the args, else what the engine printed (vLLM's `max model len`,
    # SGLang's context_len in its summary line)
    length = ctx.arg_int("max_model_len" if vllm else "context_length") or (
        ctx.vllm.max_model_len if vllm else ctx.sglang.context_len
    )
    length_flag = "--max-model-len" if vllm else "--context-length"
    if ctx.family is None:
        length_flag = "--context-length (SGLang) / --max-model-len (vLLM)"
    out.append(
        Action(
            text=f"A context length that sizes per-request tables or a whole-sequence tensor: "
            f"lower {length_flag}"
            + (f" (today {length:,})" if length else "")
            + " to what requests really need.",
            flag=None if ctx.family is None else length_flag,
            direction=None if ctx.family is None else "lower",
            current=length,
        )
    )
    tokens_flag = {
        "vllm": "--max-num-batched-tokens",
        "sglang": "--chunked-prefill-size",
    }.get(ctx.family or "", "--chunked-prefill-size (SGLang) / --max-num-batched-tokens (vLLM)")
    out.append(
        Action(
            text="An attention or logits tensor over a whole long prompt: an attention path without "
            "flash attention (eager / SDPA math, torch_native) allocates sequence² × heads; use a "
            f"flash-attention backend and bound the tokens per forward with {tokens_flag}."
        )
    )
    mm = "--limit-mm-per-prompt and the processor's max_pixels" if vllm else "max_pixels"
    out.append(
        Action(
            text=f"A multimodal input that is too large (a long video, a huge image): cap frames, "
            f"resolution and items per request ({mm})."
        )
    )
    return out


def remedy(ctx: Context) -> list[Action]:
    """The rule's own remedy, for failures whose fix is not a number (named non-memory errors)."""
    primary = ctx.primary
    text = ctx.remedy or "See the rule's explanation."
    if primary is not None and primary.kind in ("exception", "cut_traceback"):
        text = f"The failure is `{primary.message[:200]}`, not memory. {text}"
    elif primary is not None and isinstance(primary.data.get("meaning"), str):
        text = f"{str(primary.data['meaning']).capitalize()}. {text}"
    return [Action(text=text)]


def host_memory(ctx: Context) -> list[Action]:
    primary = ctx.primary
    if primary is not None and primary.kind in ("ray_oom_kill", "ray_worker_died"):
        from oomdoctor.advice import ray

        return ray.host_memory(ctx)
    kill = primary is not None and primary.kind == "host_oom_kill"
    return [
        Action(
            text="Not GPU memory: the host (CPU RAM) ran out"
            + (" and the kernel's OOM killer ended a process (exit −9)" if kill else "")
            + ". Check `dmesg -T | grep -i oom` and the container memory limit; reduce host-side "
            "memory (hierarchical cache size, --cpu-offload-gb, tokenizer workers, shared memory) "
            f"or give the host/container more RAM. {ctx.fraction_flag} does not help.",
        )
    ]


def gpu_fault(ctx: Context) -> list[Action]:
    primary = ctx.primary
    reason = primary.message if primary else ""
    capture = primary is not None and primary.kind == "graph_capture_failed"
    out = []
    if capture:
        out.append(
            Action(
                text="CUDA-graph capture failed for a reason that is not memory: "
                f"{reason[:200]!r}. SGLang's boilerplate 'set --mem-fraction-static to a smaller "
                f"value' does not apply. Confirm by starting once with {ctx.disable_graph_flag()}, "
                "then fix the kernel/driver problem.",
            )
        )
    else:
        out.append(
            Action(
                text="Not memory exhaustion: a GPU fault. Rerun with CUDA_LAUNCH_BLOCKING=1 to find "
                "the kernel, and check driver/CUDA/wheel compatibility ('no kernel image' means the "
                f"wheel has no kernels for this GPU). {ctx.fraction_flag} does not help.",
            )
        )
    return out
