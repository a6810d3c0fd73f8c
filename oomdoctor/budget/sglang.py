"""SGLang's memory budget (DESIGN §2), rebuilt from the log's own numbers: the tightest rank's
pre/post/weights, the KV pool at y, and the window of workable fractions.

Nothing is guessed silently: a value the log does not give stays None and a notice says what was
missing. The formulas themselves are in budget.formulas.
"""

from __future__ import annotations

import re

from oomdoctor.budget import cards, sglang_defaults
from oomdoctor.budget.formulas import (
    CONTEXT_OVERHEAD_GIB,
    GIB,
    kv_at,
    runtime_spare,
    snap_bytes_per_token,
)
from oomdoctor.budget.fraction import fraction, mm_reserve
from oomdoctor.budget.stages import budget_stage, omni_colocated_kv, stage_y
from oomdoctor.model import Failure, Incident, RankBudget, RankMemory, SglangBudget, Window


def _rank_budget(r: RankMemory, y: float | None) -> RankBudget:
    pre = r.pre.value if r.pre else None
    post = r.post.value if r.post else None
    weights = (
        r.weights.value
        if r.weights
        else (pre - post if pre is not None and post is not None else None)
    )
    kv = kv_at(y, pre, post) if None not in (y, pre, post) else None  # type: ignore[arg-type]
    if r.omni_kv is not None:
        kv = r.omni_kv.value  # Omni sized this stage's pool with its own formula
    logged = r.kv_logged.value if r.kv_logged else None
    return RankBudget(r.rank, pre, post, weights, kv, r.stage, r.gpu, y, logged)


def build(incident: Incident, primary: Failure | None) -> SglangBudget:
    """Rebuild SGLang's budget; ``primary`` is the failure being diagnosed (for measured
    reserves)."""
    notices: list[str] = []
    stage = budget_stage(incident, primary)
    chosen = (stage,) if stage is not None else incident.ranks
    frac = fraction(incident, chosen)
    y = frac.value if frac else None
    ranks = tuple(_rank_budget(r, stage_y(incident, r, y, stage)) for r in incident.ranks)
    if stage is not None and len([r for r in incident.ranks if r.stage]) > 1:
        where = f" on GPU {stage.gpu}" if stage.gpu is not None else ""
        notices.append(
            f"the pipeline's stages print their own budgets; this one is the {stage.stage}'s"
            f"{where} (each stage and GPU has its own row)"
        )

    with_pre = [r for r in chosen if r.pre is not None]
    with_post = [r for r in chosen if r.post is not None]
    pre = min((r.pre.value for r in with_pre if r.pre), default=None)
    imbalance = _imbalance_minimum(incident)
    tight_label = None
    if imbalance is not None and (pre is None or imbalance < pre):
        pre = imbalance  # SGLang's own MIN over ranks, printed by the TP balance check
        tight_label = _silent_rank(incident)
    post = min((r.post.value for r in with_post if r.post), default=None)
    tight = min(with_pre, key=lambda r: r.pre.value if r.pre else 0.0) if with_pre else None
    weights = max((r.weights.value for r in chosen if r.weights), default=None)
    if pre is None and post is not None and weights is not None:
        pre = post + weights
        notices.append(
            "`Load weight begin` is not in the log: pre is taken as post + weights "
            f"= {post:.2f} + {weights:.2f} GiB"
        )
    if pre is not None and pre <= 0:
        notices.append(
            f"the log says {pre:.2f} GiB was free before loading: no fraction is a share of "
            "that, so the budget does without it"
        )
        pre = None
    if weights is None and pre is not None and post is not None:
        weights = pre - post
    if len(with_pre) > 1 and tight is not None and pre is not None:
        spread = max(r.pre.value for r in with_pre if r.pre) - pre
        if spread > 1.0:
            notices.append(
                f"ranks disagree on free memory before loading by {spread:.2f} GiB; "
                f"{tight.rank} is the tightest and decides the budget (SGLang takes the minimum)"
            )

    kv_logged_m = next((r.kv_logged for r in chosen if r.kv_logged), None)
    tokens_m = next((r.kv_tokens for r in chosen if r.kv_tokens), None)
    kv_logged = kv_logged_m.value if kv_logged_m else None
    tokens = int(tokens_m.value) if tokens_m and tokens_m.value > 0 else None
    bpt = snap_bytes_per_token(kv_logged, tokens) if kv_logged and tokens else None
    summary = incident.summary
    if tokens is None and summary is not None:
        t = summary.num("tokens")
        tokens = int(t) if t is not None and t > 0 else None
    context = summary.num("context_len") if summary else None
    if context is None:
        c = incident.server_args.get("context_length")
        context = float(c) if isinstance(c, int) and c > 0 else None
    graph = max((r.graph_mem.value for r in chosen if r.graph_mem), default=None)
    headroom = summary.num("avail") if summary else None
    if headroom is None:
        headroom = min((r.graph_end.value for r in chosen if r.graph_end), default=None)

    oom = primary.oom if primary else None
    capacity = oom.total_gib if oom and oom.total_gib else None

    static = dynamic = kv = y_zero = None
    if y is not None and pre is not None:
        static, dynamic = y * pre, (1.0 - y) * pre
    if None not in (y, pre, post):
        kv = kv_at(y, pre, post)  # type: ignore[arg-type]
        colocated = omni_colocated_kv(incident, primary, stage)
        if colocated is not None:
            kv, note = colocated
            notices.append(note)
        reserved = mm_reserve(incident)
        if reserved:
            kv -= reserved
            notices.append(
                f"SGLang reserved {reserved:.2f} GB of the KV budget for multimodal allocations "
                "made after sizing (embedding cache, feature transport): KV = post − (1 − y)·pre − "
                f"{reserved:.2f}"
            )
    if pre is not None and post is not None and pre > 0:
        y_zero = 1.0 - (post - mm_reserve(incident)) / pre
    if bpt is None and kv is not None and kv < 0:
        bpt = _bpt_from_negative_profile(incident, kv)
    if kv is not None and kv_logged is not None and kv_logged > kv + 0.15:
        notices.append(
            f"the logged KV pool ({kv_logged:.2f} GiB) is larger than post − (1 − y)·pre = {kv:.2f} GiB: "
            "the fraction in effect differs from the printed one (a VLM or AMD aiter adjustment?)"
        )
    clamp = incident.server_args.get("max_total_tokens")
    smaller = kv is not None and kv_logged is not None and 0 < kv_logged < kv - max(0.5, 0.05 * kv)
    if smaller and not isinstance(clamp, int):
        notices.append(
            f"the logged KV pool ({kv_logged:.2f} GiB) is smaller than post − (1 − y)·pre = "
            f"{kv:.2f} GiB: another pool (sliding-window, mamba state, a draft model) or a "
            "rank with less free memory took the difference"
        )
    missing = [
        what
        for what, absent in (
            ("server_args (--mem-fraction-static)", y is None),
            ("`Load weight begin/end` (the KV pool)", pre is None or post is None),
        )
        if absent
    ]
    if missing:
        notices.append("not in this log: " + ", ".join(missing))

    y_min = y_max = reserve = None
    y_min_basis = y_max_basis = None
    if y_zero is not None and pre is not None:
        usage = incident.stats.peak_token_usage
        peak = round(usage * tokens) if usage is not None and tokens else None
        if bpt is not None and (context is not None or peak):
            want = max(int(context or 0), peak or 0)
            need = want * bpt / GIB
            y_min = y_zero + need / pre
            what = (
                "one request of the context length"
                if want == int(context or 0)
                else "the most tokens the running requests held at once (stats lines)"
            )
            y_min_basis = f"a KV pool for {what}: {want} tokens × {bpt} B = {need:.2f} GiB"
        else:
            y_min = y_zero
            y_min_basis = (
                "a KV pool that is not empty (bytes per token unknown until a pool is built)"
            )
        measured = _measured_shortfall(primary)
        served = primary is None and headroom is not None and incident.stats.decode_lines > 0
        if measured is not None and y is not None and dynamic is not None:
            reserve = dynamic + measured
            y_max = 1.0 - reserve / pre
            y_max_basis = (
                f"the failed allocation: the dynamic share ({dynamic:.2f} GiB) was short by "
                f"{measured:.2f} GiB (requested − free)"
            )
        elif served and y is not None and dynamic is not None and headroom is not None:
            # It served without failing: the runtime peak fit in the headroom left after startup.
            # Keep a spare part of that headroom, because the startup figure predates the load.
            spare = runtime_spare(headroom)
            reserve = dynamic - (headroom - spare)
            y_max = y + (headroom - spare) / pre
            y_max_basis = (
                f"measured: {headroom:.2f} GiB was free after startup and the server served without "
                f"failing; {spare:.2f} GiB of it is kept free"
            )
        else:
            gpu_gib = capacity
            card_is = "the OOM message's total capacity"
            if gpu_gib is None:
                estimate = pre + CONTEXT_OVERHEAD_GIB
                card = cards.guess(estimate * 1024)
                gpu_gib = card[1] / 1024 if card else estimate
                # Name what the figure is: a card guessed from pre, or pre itself plus context
                # (a co-tenant makes the real card larger; the log names none).
                card_is = (
                    f"an {card[0]}, the common card just above pre + {CONTEXT_OVERHEAD_GIB:.2f} "
                    "GiB of CUDA context"
                    if card
                    else f"estimated as pre {pre:.2f} + {CONTEXT_OVERHEAD_GIB:.2f} GiB of CUDA "
                    "context: the log names no card, and other processes would make it larger"
                )
            era = sglang_defaults.era_of(incident.version.low, incident.version.high)
            args = dict(incident.server_args)
            args.setdefault("tp_size", incident.tp_size)
            res = sglang_defaults.reserve(gpu_gib * 1024, args, era)
            reserve = res.gib
            y_max = sglang_defaults.ceiling(gpu_gib * 1024, res)
            y_max_basis = (
                f"a runtime reserve of {res.gib:.2f} GiB ({res.basis}) of a {gpu_gib:.2f} GiB "
                f"card ({card_is})"
            )
    if stage is not None and kv is not None:  # the stage's own figure, by whichever formula ran
        ranks = tuple(r._replace(kv_gib=kv) if r.stage == stage.stage else r for r in ranks)

    return SglangBudget(
        kv_reserve_gib=mm_reserve(incident),
        weights_share=weights / pre if weights and pre else None,
        rank=tight_label or (tight.rank if tight and tight.rank != "-" else None),
        stage=stage.stage if stage is not None else None,
        gpu=stage.gpu if stage is not None else None,
        pre_gib=pre,
        post_gib=post,
        weights_gib=weights,
        mem_fraction_static=y,
        mem_fraction_source=frac.source if frac else None,
        fraction_factor=frac.factor if frac else 1.0,
        fraction_factor_why=frac.factor_why if frac else None,
        static_gib=static,
        dynamic_gib=dynamic,
        kv_gib=kv,
        kv_logged_gib=kv_logged,
        kv_tokens=tokens,
        bytes_per_token=bpt,
        context_len=int(context) if context is not None else None,
        graph_gib=graph,
        headroom_gib=headroom,
        capacity_gib=capacity,
        y_zero=y_zero,
        window=Window(y_min, y_min_basis, y_max, y_max_basis),
        reserve_gib=reserve,
        ranks=ranks,
        notices=tuple(notices),
    )


def _imbalance_minimum(incident: Incident) -> float | None:
    for failure in incident.failures:
        if failure.kind == "tp_imbalance":
            low = failure.data.get("min")
            if isinstance(low, float):
                return low
    return None


def _silent_rank(incident: Incident) -> str | None:
    """The one TP rank that did not raise the imbalance error: its own free memory is the minimum."""
    tp = incident.tp_size
    failure = next((f for f in incident.failures if f.kind == "tp_imbalance"), None)
    if tp is None or failure is None or not all(re.fullmatch(r"TP\d+", r) for r in failure.ranks):
        return None
    raised = {n for r in failure.ranks if 0 <= (n := int(r[2:])) < tp}
    if tp - len(raised) != 1:  # (never a set of range(tp): a logged tp_size can be huge)
        return None
    return next(f"TP{n}" for n in range(tp) if n not in raised)


def _bpt_from_negative_profile(incident: Incident, kv: float) -> int | None:
    """``max_total_tokens=N is larger than the profiled value -T``: KV bytes / T tokens."""
    for failure in incident.failures:
        tokens = failure.data.get("profiled")
        if failure.kind == "negative_profile" and isinstance(tokens, int) and tokens < 0:
            # kv is computed from three printed 2-decimal figures: ±0.01 GiB
            return snap_bytes_per_token(kv, tokens, printed_error_gib=0.01)
    return None


def _measured_shortfall(primary: Failure | None) -> float | None:
    """How much more the dynamic share needed, from a runtime OOM's own numbers."""
    if primary is None or primary.oom is None:
        return None
    if primary.site in ("weights", "kv_pool"):
        return None  # static-share allocations say nothing about the runtime peak
    oom = primary.oom
    if oom.requested_gib is None or oom.free_gib is None:
        return None
    return max(oom.requested_gib - oom.free_gib, 0.0)
