"""The memory budget of DESIGN §2, rebuilt from the log's own numbers.

    static  = y·pre                       (weights + KV pool)
    dynamic = (1 − y)·pre                 (activations, CUDA graphs, workspaces, encoders)
    KV      = post − (1 − y)·pre          KV(y') = KV(y) + (y' − y)·pre

All figures are GiB (SGLang's "GB" is GiB). Nothing is guessed silently: a value the log does not
give stays None and a notice says what was missing. This module owns all of the arithmetic.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from oomdoctor.budget import sglang_defaults
from oomdoctor.model import Budget, Failure, Incident, RankBudget, RankMemory

GIB = float(1 << 30)
#: What a rank holds before its weights load (CUDA context, cuBLAS, NCCL): on an otherwise empty
#: card, pre is this far below memory.total (1.1–1.6 GiB on H100s). No log line measures it
#: (0.4.6–0.5.2's "Init torch distributed ends. mem usage" is only the NCCL part).
CONTEXT_OVERHEAD_GIB = 1.35


def kv_at(y: float, pre: float, post: float) -> float:
    """KV pool size at fraction y."""
    return post - (1.0 - y) * pre


def y_for_kv(kv: float, pre: float, post: float) -> float:
    """The fraction that yields a KV pool of ``kv`` GiB (inverse of kv_at)."""
    return 1.0 - (post - kv) / pre


def round_up(y: float, step: float = 0.01) -> float:
    return round(math.ceil(round(y / step, 6)) * step, 4)


def round_down(y: float, step: float = 0.01) -> float:
    return round(math.floor(round(y / step, 6)) * step, 4)


def snap_bytes_per_token(kv_gib: float, tokens: int, printed_error_gib: float = 0.01) -> int:
    """Bytes per token from a logged pool size printed with two decimals.

    The sizes are rounded, so the quotient is only known within an interval; real cell sizes are
    products of heads × head_dim × layers × dtype bytes, so the value in that interval divisible
    by the highest power of two is the one SGLang used.
    """
    central = kv_gib * GIB / tokens
    ends = (
        (kv_gib - printed_error_gib) * GIB / tokens,
        (kv_gib + printed_error_gib) * GIB / tokens,
    )
    return snap_between(min(ends), max(ends), central)


def snap_between(low: float, high: float, central: float) -> int:
    """The value in [low, high] divisible by the highest power of two (else ``central``)."""
    for power in range(20, 3, -1):
        step = 1 << power
        candidate = round(central / step) * step
        if low <= candidate <= high and candidate > 0:
            return int(candidate)
    return round(central)


class Fraction(NamedTuple):
    value: float
    source: str
    #: SGLang multiplies whatever --mem-fraction-static says by this (0.3.6/0.4.6 multimodal,
    #: AMD aiter): a value to pass is the wanted y divided by it.
    factor: float = 1.0
    factor_why: str | None = None


def fraction(incident: Incident, ranks: tuple[RankMemory, ...] | None = None) -> Fraction | None:
    """The --mem-fraction-static that was in effect, and where that value came from.

    ``ranks`` are the checkpoints of the budget being built (one pipeline stage's, SGLang Omni):
    a stage's own startup line says its own fraction, whatever the other stages use."""
    ranks = incident.ranks if ranks is None else ranks
    staged = [r for r in ranks if r.stage and r.fraction and 0 < r.fraction <= 1]
    if staged:
        r = staged[0]
        return Fraction(float(r.fraction or 0), f"the {r.stage} stage's startup line")
    args = incident.server_args
    y = args.get("mem_fraction_static")
    found: Fraction | None = None
    if isinstance(y, int | float) and not isinstance(y, bool) and 0 < y <= 1:
        found = Fraction(float(y), "server_args")
    else:
        for failure in incident.failures:
            fy = failure.data.get("y")
            if isinstance(fy, float) and 0 < fy <= 1:
                found = Fraction(fy, "the error message")
                break
    if found is None:  # a launch command echoed into the log (`+ exec ... --mem-fraction-static`)
        flags = [f for f in incident.facts_of("launch_flag") if 0 < (f.num("y") or 0) <= 1]
        # Several Omni stages: the thinker's own flag, else the one that applies to every stage.
        preferred = [f for f in flags if f.text("stage") in ("thinker", None)]
        chosen = flags[0] if len(flags) == 1 else (preferred[0] if preferred else None)
        if chosen is not None:
            found = Fraction(float(chosen.num("y") or 0), "the launch command")
    if found is None:
        for fact in incident.facts_of("omni_stage"):
            fy = fact.num("mem_fraction_static")
            if fy is not None and 0 < fy <= 1:
                found = Fraction(fy, "the Omni stage line")
    for fact in incident.facts_of("mm_fraction_adjust"):
        to = fact.num("to") or fact.num("to2")
        if to is not None and not (found is not None and abs(found.value - to) < 0.0006):
            # 0.4.10 prints server_args after the adjustment, unrounded: keep that when it agrees.
            # 0.4.6 ("reduce ... to X") multiplies even a value the user passed by 0.90.
            if fact.num("to") is not None and found is not None and found.source == "server_args":
                factor = round(to / found.value, 2)
                found = Fraction(to, "the multimodal adjustment line", factor, "0.4.6 multimodal")
            else:
                found = Fraction(to, "the multimodal adjustment line")
        elif found is not None and "adjust --mem-fraction-static for multimodal" in fact.line.text:
            found = Fraction(
                round(found.value * 0.95, 4),
                "server_args × 0.95 (0.3.6 multimodal)",
                0.95,
                "0.3.6 multimodal",
            )
    if found is not None and found.source == "server_args":
        found = _silent_factor(incident, found, ranks) or found
    if found is None:
        found = _from_kv_line(incident, ranks)
    return found


def _y_used(incident: Incident, ranks: tuple[RankMemory, ...]) -> float | None:
    """y in effect = 1 − (post − KV logged)/pre, from the first rank that printed all three."""
    for r in ranks:
        if r.pre is None or r.post is None or r.kv_logged is None or r.pre.value <= 0:
            continue
        return 1.0 - (r.post.value - r.kv_logged.value - _mm_reserve(incident)) / r.pre.value
    return None


def _from_kv_line(incident: Incident, ranks: tuple[RankMemory, ...]) -> Fraction | None:
    """No line prints y: the rank that printed pre, post and its KV pool says what y was."""
    y = _y_used(incident, ranks)
    if y is not None and 0 < y < 1:
        return Fraction(round(y, 3), "derived from the KV line: 1 − (post − KV)/pre")
    return None


#: Factors SGLang applies after printing server_args (reference §2.1): multimodal models ×0.95
#: (0.3.6) and ×0.90 (0.4.6), AMD aiter with long contexts ×0.85 (0.4.10–0.5.2).
_SILENT_FACTORS = ((0.90, "0.4.6 multimodal"), (0.95, "0.3.6 multimodal"), (0.85, "AMD aiter"))


def _silent_factor(
    incident: Incident, printed: Fraction, ranks: tuple[RankMemory, ...]
) -> Fraction | None:
    """The fraction really used when the KV line only fits a known post-print factor.

    When the y the KV line implies equals printed × factor (to within the rounding of the printed
    GB), SGLang applied the factor even though no line said so (an excerpt that starts after the
    adjustment line, or a silent one).
    """
    y_used = _y_used(incident, ranks)
    if y_used is None or abs(y_used - printed.value) < 0.004:
        return None  # no KV line, or the printed value is the one used
    for factor, why in _SILENT_FACTORS:
        if abs(y_used - printed.value * factor) < 0.004:
            return Fraction(
                round(printed.value * factor, 4),
                f"server_args × {factor} ({why}; the KV line fits only this value)",
                factor,
                why,
            )
    return None


def _omni_colocated_kv(
    incident: Incident, primary: Failure | None, stage: RankMemory | None
) -> tuple[float, str] | None:
    """SGLang Omni with a stage budget replaces SGLang's formula for the stage (§6.2):
    KV = int(total × total_gpu_memory_fraction) − what the stage process already holds."""
    if incident.engine != "sglang-omni":
        return None
    name = stage.stage if stage is not None and stage.stage else "thinker"
    data = primary.data if primary is not None else {}
    total, fraction, used = data.get("total"), data.get("fraction"), data.get("used")
    mine = primary is not None and (primary.stage in (None, name))
    if (
        mine
        and isinstance(total, float)
        and isinstance(fraction, float)
        and isinstance(used, float)
    ):
        budget = int(total * GIB * fraction) / GIB
        return budget - used, (
            f"Omni's colocated budget sized the {name}'s KV pool: int({total:.2f} × {fraction:.3f}) "
            f"− {used:.2f} GiB held by the stage = {budget - used:.2f} GiB (SGLang's own formula "
            "does not apply with a stage budget)"
        )
    if stage is not None and stage.omni_kv is not None:
        available = stage.omni_kv.value
        return available, (
            f"Omni's colocated budget sized the {name}'s KV pool: available_for_kv = "
            f"{available:.2f} GiB (int(total × the stage's fraction) − what the stage holds)"
        )
    return None


def budget_stage(incident: Incident, primary: Failure | None) -> RankMemory | None:
    """Whose budget to build when pipeline stages print their own checkpoints (SGLang Omni):
    the failing stage's own; else the engine stage on the failing GPU (the thinker first);
    else the thinker; else the last stage that loaded."""
    staged = [r for r in incident.ranks if r.stage]
    if not staged:
        return None
    if primary is not None and primary.stage:
        own = [r for r in staged if r.stage == primary.stage]
        if own:
            return own[0]
    gpu = _failing_gpu(incident, primary)
    if gpu is not None:
        on_gpu = [r for r in staged if r.gpu == gpu]
        if on_gpu:
            return next((r for r in on_gpu if r.stage == "thinker"), on_gpu[0])
    thinker = [r for r in staged if r.stage == "thinker"]
    return thinker[0] if thinker else staged[-1]


def _failing_gpu(incident: Incident, primary: Failure | None) -> int | None:
    if primary is None:
        return None
    if primary.oom is not None and primary.oom.gpu is not None:
        return primary.oom.gpu
    for fact in incident.facts_of("omni_device"):
        if primary.stage and fact.text("stage") == primary.stage:
            gpu = fact.num("gpu")
            return int(gpu) if gpu is not None else None
    return None


def _mm_reserve(incident: Incident) -> float:
    """0.5.23: GB of the KV budget set aside for multimodal allocations made after sizing."""
    return max((f.num("gb") or 0.0 for f in incident.facts_of("mm_kv_reserve")), default=0.0)


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


def _stage_y(
    incident: Incident, r: RankMemory, y: float | None, chosen: RankMemory | None
) -> float | None:
    """Each stage's own fraction (its startup line, else what the KV line implies)."""
    if not r.stage or r is chosen:
        return y
    if r.fraction and 0 < r.fraction <= 1:
        return r.fraction
    own = _y_used(incident, (r,))
    return round(own, 3) if own is not None and 0 < own < 1 else y


def build(incident: Incident, primary: Failure | None) -> Budget:
    """Rebuild SGLang's budget; ``primary`` is the failure being diagnosed (for measured
    reserves)."""
    notices: list[str] = []
    stage = budget_stage(incident, primary)
    chosen = (stage,) if stage is not None else incident.ranks
    frac = fraction(incident, chosen)
    y = frac.value if frac else None
    ranks = tuple(_rank_budget(r, _stage_y(incident, r, y, stage)) for r in incident.ranks)
    if stage is not None and len([r for r in incident.ranks if r.stage]) > 1:
        where = f" on GPU {stage.gpu}" if stage.gpu is not None else ""
        notices.append(
            f"the pipeline's stages print their own budgets; this one is the {stage.stage}'s"
            f"{where} (each stage is listed under ranks)"
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
    if weights is None and pre is not None and post is not None:
        weights = pre - post
    if len(with_pre) > 1 and tight is not None:
        spread = max(r.pre.value for r in with_pre if r.pre) - pre  # type: ignore[operator]
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
        colocated = _omni_colocated_kv(incident, primary, stage)
        if colocated is not None:
            kv, note = colocated
            notices.append(note)
        mm_reserve = _mm_reserve(incident)
        if mm_reserve:
            kv -= mm_reserve
            notices.append(
                f"SGLang reserved {mm_reserve:.2f} GB of the KV budget for multimodal allocations "
                "made after sizing (embedding cache, feature transport): KV = post − (1 − y)·pre − "
                f"{mm_reserve:.2f}"
            )
    if pre is not None and post is not None and pre > 0:
        y_zero = 1.0 - (post - _mm_reserve(incident)) / pre
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
    if y is None:
        notices.append("the log does not show --mem-fraction-static (no server_args line)")
    if pre is None or post is None:
        notices.append(
            "the log lacks the `Load weight begin/end` memory lines, so KV cannot be computed"
        )

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
            if gpu_gib is None:
                estimate = pre + CONTEXT_OVERHEAD_GIB
                card = sglang_defaults.guess_card(estimate * 1024)
                gpu_gib = card[1] / 1024 if card else estimate
            era = sglang_defaults.era_of(incident.version.low, incident.version.high)
            args = dict(incident.server_args)
            args.setdefault("tp_size", incident.tp_size)
            res = sglang_defaults.reserve(gpu_gib * 1024, args, era)
            reserve = res.gib
            y_max = 1.0 - reserve / pre
            y_max_basis = f"a runtime reserve of {res.gib:.2f} GiB ({res.basis})"
    window_empty = (y_min > y_max) if y_min is not None and y_max is not None else None
    if stage is not None and kv is not None:  # the stage's own figure, by whichever formula ran
        ranks = tuple(r._replace(kv_gib=kv) if r.stage == stage.stage else r for r in ranks)

    return Budget(
        kv_reserve_gib=_mm_reserve(incident),
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
        y_min=y_min,
        y_min_basis=y_min_basis,
        y_max=y_max,
        y_max_basis=y_max_basis,
        reserve_gib=reserve,
        window_empty=window_empty,
        ranks=ranks,
        notices=tuple(notices),
    )


def runtime_spare(headroom_gib: float) -> float:
    """How much of the post-startup headroom to keep free when growing into it: at least 2 GiB,
    and half of it, because the startup figure was taken before any request ran."""
    return max(2.0, headroom_gib / 2)


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
    missing = set(range(tp)) - {int(r[2:]) for r in failure.ranks}
    return f"TP{missing.pop()}" if len(missing) == 1 else None


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
