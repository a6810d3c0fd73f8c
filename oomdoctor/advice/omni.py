"""Advice for SGLang Omni pipelines, with the dotted per-stage flags of `sgl-omni serve`
(0.1.9: `--<stage>.engine.mem_fraction_static`, `--<stage>.gpu_memory_fraction`,
`--<stage>.factory.encoder_mem_reserve`, `--<stage>.gpu`). Omni's own rejection hint still names
`--thinker-mem-fraction-static`, an older spelling; the dotted flag is the one the CLI takes.
"""

from __future__ import annotations

from oomdoctor.advice.context import Context
from oomdoctor.budget import targets
from oomdoctor.budget.targets import MARGIN_MIN_GIB
from oomdoctor.judge import holders
from oomdoctor.model import Action

THINKER_FRACTION = "--thinker.engine.mem_fraction_static"
THINKER_BUDGET = "--thinker.gpu_memory_fraction"
ENCODER_RESERVE = "--thinker.factory.encoder_mem_reserve"


def _stage_fraction(ctx: Context) -> float | None:
    """The thinker's stage budget (total_gpu_memory_fraction) when it runs colocated."""
    for kind in ("omni_memory_profile", "omni_stage"):
        for fact in ctx.incident.facts_of(kind):
            f = fact.num("total_gpu_memory_fraction")
            if f is not None and 0 < f <= 1:
                return f
    return None


def thinker_kv(ctx: Context) -> list[Action]:
    """Requests refused because the thinker's KV pool cannot hold one of them: grow the pool."""
    rejects = ctx.incident.facts_of("omni_kv_reject")
    worst = max(rejects, key=lambda f: f.num("required") or 0.0, default=None)
    b = ctx.sglang
    y, pre, bpt = b.mem_fraction_static, b.pre_gib, b.bytes_per_token
    out: list[Action] = []
    if worst is None:
        return out
    required = int(worst.num("required") or 0)
    capacity = int(worst.num("cap") or 0)
    missing = max(required - capacity, 0)
    lead = (
        f"The thinker's KV pool holds {capacity:,} tokens and a request needed {required:,} "
        f"(input + max_new_tokens)"
    )
    if bpt and pre and y is not None and missing:
        need_gib = targets.kv_for_tokens(missing, bpt)
        stage = _stage_fraction(ctx)
        if stage is not None and b.capacity_gib:
            new = targets.thinker_budget_for(stage, need_gib, b.capacity_gib)
            out.append(
                Action(
                    text=f"{lead}: {missing:,} tokens × {bpt:,} B = {need_gib:.2f} GiB more. Raise "
                    f"the thinker's stage budget {THINKER_BUDGET} to {new:.2f} (today {stage:.2f}).",
                    flag=THINKER_BUDGET,
                    direction="raise",
                    value=new,
                    current=stage,
                )
            )
        else:
            new = targets.thinker_y_for(y, need_gib, pre)
            out.append(
                Action(
                    text=f"{lead}: {missing:,} tokens × {bpt:,} B = {need_gib:.2f} GiB more. Set "
                    f"{THINKER_FRACTION} {new:.2f} (today {y:.2f}); Omni's hint calls it "
                    "--thinker-mem-fraction-static.",
                    flag=THINKER_FRACTION,
                    direction="raise",
                    value=new,
                    current=y,
                    basis=f"y + (required − capacity) × bytes per token / pre + 0.01 = {y:.3f} + "
                    f"{need_gib:.2f}/{pre:.2f} + 0.01",
                )
            )
    else:
        out.append(
            Action(
                text=f"{lead}: raise {THINKER_FRACTION} (Omni's hint calls it "
                "--thinker-mem-fraction-static).",
                flag=THINKER_FRACTION,
                direction="raise",
                current=y,
            )
        )
    out.append(
        Action(
            alternative=True,
            text="Or cap what one request may ask for: a lower max_tokens per request, or a "
            "shorter input (long audio/video prompts turn into many tokens).",
        )
    )
    return out


def colocated_budget(ctx: Context) -> list[Action]:
    """`Colocated GPU memory budget leaves no KV-cache headroom`: the stage budget is too small."""
    primary = ctx.primary
    data = primary.data if primary else {}
    total, fraction, used = data.get("total"), data.get("fraction"), data.get("used")
    if not all(isinstance(v, float) for v in (total, fraction, used)):
        return []
    assert isinstance(total, float) and isinstance(fraction, float) and isinstance(used, float)
    floor, new = targets.colocated_budget_floor(total, used)
    return [
        Action(
            text=f"The thinker's stage budget {fraction:.3f} × {total:.2f} GiB = "
            f"{fraction * total:.2f} GiB does not even cover what the stage already holds "
            f"({used:.2f} GiB: weights, context, graphs). Raise {THINKER_BUDGET} to {new:.2f} "
            f"(today {fraction:.2f}): above {floor:.3f} the rest becomes the KV pool.",
            flag=THINKER_BUDGET,
            direction="raise",
            value=new,
            current=fraction,
            basis=f"used / total = {used:.2f}/{total:.2f} = {floor:.3f}, plus ≥ 2 GiB of KV pool",
        ),
        Action(
            alternative=True,
            text="Or move a stage that shares the GPU elsewhere (--<stage>.gpu N) so the thinker "
            "can be given more of it.",
        ),
    ]


def encoder_reserve(ctx: Context) -> Action:
    """The pinned-fraction trap: a pinned thinker fraction silently drops encoder_mem_reserve."""
    return Action(
        text=f"encoder_mem_reserve was 0.0 because the thinker's fraction was pinned "
        f"({THINKER_FRACTION}): drop the pin and Omni lowers its auto fraction by "
        f"{ENCODER_RESERVE} (default 0.05; raise it, e.g. 0.10, for long audio or many images), "
        "or move the encoder stages to another GPU (--image_encoder.gpu 1 --audio_encoder.gpu 1).",
    )


def placement(ctx: Context) -> list[Action]:
    primary = ctx.primary
    if primary is None:
        return []
    gpu = primary.data.get("gpu")
    fraction, limit = primary.data.get("fraction"), primary.data.get("limit")
    where = f"GPU {gpu}" if gpu is not None else "a GPU"
    if isinstance(fraction, float) and isinstance(limit, float):
        text = (
            f"The stages placed on {where} declare {fraction:.3f} of its memory, over the "
            f"placement limit {limit:.3f}: lower their --<stage>.gpu_memory_fraction so the sum "
            f"is at most {limit:.3f}, or move a stage to another GPU (--<stage>.gpu N)."
        )
    else:
        text = (
            f"The stages placed on {where} declare more memory than the card has (fractions, "
            "total_reserve_bytes or engine.kv_cache_bytes summed): lower those budgets or move "
            "a stage to another GPU (--<stage>.gpu N). Omni refused before anything was loaded."
        )
    return [Action(text=text)]


def busiest_sibling(ctx: Context) -> tuple[str, int, float] | None:
    """The other stage of the pipeline that holds the most of the failing GPU (stage, pid, GiB)."""
    if ctx.oom is None:
        return None
    stages = holders.sibling_pids(ctx.incident)
    view = ctx.oom.holders
    siblings = [h for h in view.holders if h.role == "sibling" and h.pid is not None]
    if not siblings:
        return None
    top = max(siblings, key=lambda h: h.gib)
    assert top.pid is not None
    return stages.get(top.pid, "stage"), top.pid, top.gib


def stage_fraction_action(ctx: Context, stage: str, pid: int, gib: float) -> list[Action]:
    """Lower the fraction of the sibling stage that fills the failing GPU (not the thinker's)."""
    facts = [f for f in ctx.incident.facts_of("omni_stage") if f.text("stage") == stage]
    y = next((f.num("mem_fraction_static") for f in facts if f.num("mem_fraction_static")), None)
    pre = next((f.num("pre_load_avail_mem") for f in facts if f.num("pre_load_avail_mem")), None)
    oom = ctx.primary.oom if ctx.primary else None
    short = ctx.shortfall
    flag = f"--{stage}.engine.mem_fraction_static"
    where = f"GPU {oom.gpu}" if oom is not None and oom.gpu is not None else "this GPU"
    lead = (
        f"The {stage} stage (pid {pid}) holds {gib:.2f} GiB of {where}, where the failing stage "
        "runs"
    )
    if y is not None and pre and short is not None:
        new = targets.lower_stage_y(y, pre, short)
        return [
            Action(
                text=f"{lead}: set {flag} {new:.2f} (today {y:.2f}), which leaves "
                f"{(y - new) * pre:.2f} GiB more of it to the other stages; or move the failing "
                "stage to a GPU with room (--<stage>.gpu N).",
                flag=flag,
                direction="lower",
                value=new,
                current=y,
                basis=f"y − (requested − free + {MARGIN_MIN_GIB:.0f} GiB)/pre of {stage} = "
                f"{y:.3f} − ({short:.3f} + {MARGIN_MIN_GIB:.0f})/{pre:.2f}",
            )
        ]
    return [
        Action(
            text=f"{lead}: lower {flag}, or move the failing stage to a GPU with room "
            "(--<stage>.gpu N).",
            flag=flag,
            direction="lower",
            current=y,
        )
    ]


def stage_load_negative(ctx: Context) -> list[Action]:
    primary = ctx.primary
    pre = primary.data.get("pre") if primary else None
    post = primary.data.get("post") if primary else None
    moved = (
        f" (free memory went from {pre:.2f} to {post:.2f} GiB during the load, "
        f"{post - pre:.2f} GiB that someone else released)"
        if isinstance(pre, float) and isinstance(post, float)
        else ""
    )
    return [
        Action(
            text="Another process on this GPU released memory while the stage loaded its weights"
            f"{moved}, so Omni's load-delta accounting is void. Start the pipeline when the GPU is "
            "quiet (wait for old processes to exit; nvidia-smi shows who), or give the stage an "
            "explicit budget (--<stage>.gpu_memory_fraction or engine.kv_cache_bytes) so it does "
            "not size itself from the delta.",
        )
    ]
