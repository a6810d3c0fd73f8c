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
from oomdoctor.advice.other import message_holders, snapshot_holders
from oomdoctor.budget.formulas import GIB, round_down, round_up
from oomdoctor.model import Action

FLAG = "--gpu-memory-utilization"
DEFAULT_U = 0.9
#: The largest single GPU memory (GiB) worth sizing for (B300 288 GB); beyond it no u helps.
LARGEST_CARD_GIB = 268.0
#: A raised u is placed this far above the smallest workable value.
RAISE_MARGIN = 0.02
#: The largest u worth suggesting: vLLM itself needs the CUDA context outside its budget.
U_CEILING = 0.98


def _u(ctx: Context) -> float | None:
    return ctx.vllm.gpu_memory_utilization


def _fmt(u: float | None) -> str:
    return "unknown" if u is None else f"{u:.2f}"


def _kv_tokens_at(ctx: Context, kv_gib: float) -> str:
    bpt = ctx.vllm.bytes_per_token
    if not bpt or kv_gib <= 0:
        return ""
    return f" (≈{int(kv_gib * GIB / bpt):,} tokens at {bpt:,} B/token)"


def raise_utilization(ctx: Context) -> list[Action]:
    """Startup: no KV cache (or none big enough for one max_model_len request) fits in u."""
    b = ctx.vllm
    u, total, kv = _u(ctx), b.capacity_gib, b.kv_gib
    out: list[Action] = []
    if u is not None and total and kv is not None and b.window.low is not None:
        target = min(round_up(b.window.low + RAISE_MARGIN), U_CEILING)
        if b.window.high is not None:
            target = min(target, max(b.window.high, b.window.low))
        new_kv = kv + (target - u) * total
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
        card = missing / (U_CEILING - u_now) if u_now < U_CEILING else float("inf")
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
                text=f"Or cap --max-model-len at {estimated:,} (today "
                + (f"{length:,}" if length else "the model's default")
                + "): vLLM's own estimate of the longest request this KV cache can hold.",
                flag="--max-model-len",
                direction="lower",
                value=estimated,
                current=length,
            )
        ]
    if length and b.kv_gib and b.kv_gib > 0 and b.bytes_per_token:
        fits = int(b.kv_gib * GIB / b.bytes_per_token) // 256 * 256
        if 0 < fits < length:
            return [
                Action(
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
    u, total = _u(ctx), b.capacity_gib
    oom = ctx.primary.oom if ctx.primary else None
    out: list[Action] = []
    if ctx.primary is not None and ctx.primary.kind == "startup_free_memory":
        return _fit_startup_check(ctx)
    short = (
        oom.requested_gib - oom.free_gib
        if oom and oom.requested_gib is not None and oom.free_gib is not None
        else None
    )
    need = f" (at least {short:.2f} GiB more)" if short and short > 0 else ""
    if u is not None and total and b.window.high is not None and b.window.high < u:
        target = b.window.high
        freed = (u - target) * total
        kv_after = (b.kv_gib - freed) if b.kv_gib is not None else None
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
    fit = round_down(free / total)
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


def free_gpu(ctx: Context) -> list[Action]:
    out = snapshot_holders(ctx) or message_holders(ctx)
    b = ctx.vllm
    primary = ctx.primary
    u = _u(ctx)
    kind = primary.kind if primary else None
    if kind == "startup_free_memory" and primary is not None:
        free, total = primary.data.get("free"), primary.data.get("total")
        if isinstance(free, float) and isinstance(total, float):
            held = total - free
            out.insert(
                0,
                Action(
                    text=f"Another process holds ≈{held:.2f} GiB of this GPU ({free:.2f} of "
                    f"{total:.2f} GiB free at startup): stop it or move it (nvidia-smi shows "
                    "who).",
                ),
            )
            if b.window.high is not None and u is not None and b.window.high < u:
                out.append(
                    Action(
                        text=f"If it must stay — set --gpu-memory-utilization {b.window.high:.2f} "
                        f"(today {u:.2f}): vLLM then asks for no more than is free "
                        f"({b.window.high_basis}).",
                        flag=FLAG,
                        direction="lower",
                        value=b.window.high,
                        current=u,
                    )
                )
    elif kind == "profiling_free_changed":
        out.insert(
            0,
            Action(
                text="Another process released (or grabbed) GPU memory while vLLM was profiling, "
                "so vLLM could not measure its own peak: start vLLM when the other processes on "
                "the GPU are settled, or give vLLM its own GPU/container.",
            ),
        )
    rl = ctx.features.get("rl.colocated")
    if rl is not None and rl.value:
        out.append(
            Action(
                text="RL colocation: the trainer and vLLM take turns on the GPU. Make the trainer "
                "offload or free its memory before vLLM's wake_up, and size "
                "--gpu-memory-utilization for what stays resident while both are awake.",
            )
        )
    if kind not in ("startup_free_memory", "profiling_free_changed") and ctx.primary is not None:
        sized = lower_utilization(ctx)
        if sized and sized[0].flag == FLAG:
            first = sized[0]
            out.append(first._replace(text="If the other process must stay — " + first.text))
    if not any(not a.text.startswith("If ") for a in out):
        out.insert(
            0,
            Action(
                text=ctx.remedy
                or "Another process holds memory on this GPU: free it (nvidia-smi shows who), "
                "then restart vLLM."
            ),
        )
    return out


def _model(ctx: Context) -> str:
    args = ctx.incident.server_args
    name = args.get("model") or args.get("model_path") or ""
    return name if isinstance(name, str) else ""


def _max_pixels(ctx: Context) -> int | None:
    import re

    kwargs = ctx.incident.server_args.get("mm_processor_kwargs")
    m = re.search(r"'max_pixels': (\d+)", kwargs) if isinstance(kwargs, str) else None
    return int(m.group(1)) if m else None


def reserve_encoder(ctx: Context) -> list[Action]:
    """A multimodal encoder ran out, usually in the startup profile run with dummy items."""
    seqs = ctx.arg_int("max_num_seqs")
    tokens = ctx.arg_int("max_num_batched_tokens")
    profile = ctx.features.get("vllm.profile_run_oom")
    in_profile = profile is not None and bool(profile.value)
    mm = ctx.incident.facts_of("vllm_mm_profile")
    enc_dec = any("multi-modal models" in f.line.text for f in mm)  # V0 encoder-decoder runner
    items = next((f for f in mm if f.num("items")), None)
    out: list[Action] = []
    if enc_dec:
        target = 16 if seqs is None or seqs > 16 else max(seqs // 2, 1)
        out.append(
            Action(
                text=f"Lower --max-num-seqs to {target} "
                + (f"(today {seqs})" if seqs else "(vLLM's default is 256)")
                + ": the V0 "
                "encoder-decoder profile run builds one dummy multimodal sequence per slot, each "
                "with images of the maximum size.",
                flag="--max-num-seqs",
                direction="lower",
                value=target,
                current=seqs,
            )
        )
    how_many = (
        f" (this run profiled {int(items.num('items') or 0)} {items.text('modality')} items)"
        if items is not None
        else ""
    )
    pixels = _max_pixels(ctx)
    model = _model(ctx).lower()
    if pixels and pixels > 1003520:
        out.append(
            Action(
                text=f"Lower max_pixels (today {pixels:,}) in --mm-processor-kwargs, e.g. "
                "'{\"max_pixels\": 1003520}' (1280×28×28): the encoder's activations grow with "
                "the pixels of the largest image, and the profile run uses exactly that size.",
                flag="--mm-processor-kwargs",
                direction="set",
                value='{"max_pixels": 1003520}',
            )
        )
    one_item = items is not None and (items.num("items") or 0) <= 1
    if not one_item:
        out.append(
            Action(
                text="Profile (and serve) fewer multimodal items: --limit-mm-per-prompt "
                '\'{"image": 1}\' (add "video"/"audio" as the model takes them); vLLM sizes '
                f"its profile run by the most items a prompt may carry{how_many}.",
                flag="--limit-mm-per-prompt",
                direction="set",
                value='{"image": 1}',
            )
        )
    if items is not None:
        out.append(
            Action(
                text="Lower --max-num-batched-tokens"
                + (f" ({tokens} → {tokens // 2})" if tokens else "")
                + ": it also sets the encoder cache budget, and with it how many items are "
                "profiled at once.",
                flag="--max-num-batched-tokens",
                direction="lower",
                value=tokens // 2 if tokens else None,
                current=tokens,
            )
        )
    if not (pixels and pixels > 1003520):
        size = (
            "--mm-processor-kwargs '{\"max_pixels\": 1003520}' (1280×28×28 per image)"
            if "qwen" in model and "vl" in model
            else "the processor's image-size option (--mm-processor-kwargs, e.g. max_pixels "
            "for Qwen-VL)"
        )
        out.append(
            Action(
                text=f"Cap the input size the encoder must handle: {size}, and fewer video frames.",
                flag="--mm-processor-kwargs",
                direction="set",
            )
        )
    if in_profile:
        out.append(
            Action(
                text="--gpu-memory-utilization does not help here: the profile run happens before "
                "the KV cache exists and may use all free memory. Fewer/smaller items, a GPU with "
                "more memory, or --tensor-parallel-size do.",
            )
        )
    else:
        out.extend(lower_utilization(ctx)[:1])
    return out


def preemption(ctx: Context) -> list[Action]:
    stats = ctx.incident.stats
    u = _u(ctx)
    return [
        Action(
            text=f"vLLM preempted requests {stats.retractions} time(s) for lack of KV cache space "
            "and recomputed them: graceful, not a crash. If it is frequent, give the KV cache "
            "more room: raise --gpu-memory-utilization"
            + (f" (today {u:.2f})" if u is not None else "")
            + ", lower --max-num-seqs, or shorten --max-model-len.",
        )
    ]


def weights_do_not_fit(ctx: Context) -> list[Action]:
    tp = ctx.arg_int("tensor_parallel_size")
    more = f" (today {tp})" if tp else ""
    return [
        Action(
            text=f"The weights do not fit on one GPU: raise --tensor-parallel-size{more}, load "
            "quantised weights (--quantization), or offload part of them (--cpu-offload-gb). "
            "--gpu-memory-utilization only sizes what comes after the weights.",
        )
    ]


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
            value=round_down(u - 0.03) if u is not None else None,
        )
    ]


def kv_slots(ctx: Context) -> list[Action]:
    """The KV cache's own accounting ran out of blocks (kvcached's elastic pool raises instead
    of letting vLLM preempt): not a CUDA allocation."""
    primary = ctx.primary
    data = primary.data if primary else {}
    need, avail = data.get("need"), data.get("available")
    text = "Not a GPU OOM: the KV cache had fewer free pages than the scheduled step needed"
    if isinstance(need, int | float) and isinstance(avail, int | float):
        text += f" ({need:g} needed, {avail:g} free)"
    if "kvcached" in ctx.incident.stack:
        text += (
            ". kvcached's elastic pool raised instead of letting vLLM preempt: upgrade kvcached "
            "(later releases turn this into a scheduling miss)"
        )
    out = [Action(text=text + ".")]
    out.append(
        halve(
            "--max-num-seqs",
            ctx.arg_int("max_num_seqs"),
            "fewer sequences share the KV cache.",
            example=128,
        )
    )
    out.append(
        Action(
            text="Or give the KV cache more memory: raise --gpu-memory-utilization if the memory "
            "outside vLLM's budget allows it, or use --kv-cache-dtype fp8.",
        )
    )
    return out
