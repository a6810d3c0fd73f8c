"""vLLM advice that is not about u first: co-tenants and RL colocation, multimodal encoders and
the profile run, preemption, weights that do not fit, graph capture, the KV cache's own pages."""

from __future__ import annotations

from oomdoctor.advice import vllm_profiling
from oomdoctor.advice.context import Context, halve
from oomdoctor.advice.holders import message_holders, snapshot_holders
from oomdoctor.advice.vllm_fraction import FLAG, lower_utilization
from oomdoctor.model import Action


def free_gpu(ctx: Context) -> list[Action]:
    out = snapshot_holders(ctx) or message_holders(ctx)
    b = ctx.vllm
    primary = ctx.primary
    u = ctx.vllm.gpu_memory_utilization
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
                        alternative=True,
                    )
                )
    elif kind == "profiling_free_changed" and primary is not None:
        out[0:0] = vllm_profiling.guard(primary)
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
            out.append(
                first._replace(
                    text="If the other process must stay — " + first.text, alternative=True
                )
            )
    if not any(not a.alternative for a in out):
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
    u = ctx.vllm.gpu_memory_utilization
    return [
        Action(
            text=f"vLLM preempted requests {stats.preempted} time(s) for lack of KV cache space "
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
            alternative=True,
            text="Or give the KV cache more memory: raise --gpu-memory-utilization if the memory "
            "outside vLLM's budget allows it, or use --kv-cache-dtype fp8.",
        )
    )
    return out
