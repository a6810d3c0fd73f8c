"""The flat view of an incident that rule conditions read: ``name → value (+ evidence lines)``.

Rules never see the incident itself; they see these named values. Every feature that a rule
can use is listed in FEATURE_DOCS (``oomdoctor rules features`` prints them), so rule files are
validated against real names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.budget import as_sglang
from oomdoctor.budget.costs import start_gap, start_gap_explains
from oomdoctor.knowledge import family
from oomdoctor.knowledge.kinds import RETRY_KINDS
from oomdoctor.model import Budget, Fact, Failure, Incident, Line, Scalar, VllmBudget

if TYPE_CHECKING:  # the GPU modules load only when there is a GPU state to look at
    from oomdoctor.gpu.view import GpuView
    from oomdoctor.judge import Judgement
    from oomdoctor.judge.oom import OomJudgement

#: Parts of the stack that mean an RL trainer shares the GPUs with the engine.
#: (vLLM's sleep mode alone is not one: single servers use it too.)
RL_STACK = frozenset({"verl", "slime", "openrlhf", "torch_memory_saver"})
#: Engines whose stages are separate processes sharing GPUs by design.
PIPELINE_ENGINES = frozenset({"sglang-omni", "vllm-omni"})


class Feature(NamedTuple):
    value: Scalar
    evidence: tuple[Line, ...] = ()


def _recognised(incident: Incident) -> bool:
    known = {k for k in incident.fact_counts if k not in ("marker", "oom_part", "code")}
    return bool(incident.engine or incident.failures or incident.ranks or known)


def _lines(*items: Line | None) -> tuple[Line, ...]:
    return tuple(i for i in items if i is not None)


class _Builder:
    def __init__(self) -> None:
        self.values: dict[str, Feature] = {}

    def __call__(self, name: str, value: Scalar, *evidence: Line | None) -> None:
        self.values[name] = Feature(value, _lines(*evidence))


def compute(judgement: Judgement) -> dict[str, Feature]:
    """Every feature of FEATURE_DOCS, from the judgement stage's output (oomdoctor/judge): the
    placed incident, the budget, the OOM message's judgement and the GPU snapshot's."""
    incident, budget = judgement.incident, judgement.budget
    judged, gpu = judgement.oom, judgement.gpu
    primary = incident.primary
    put = _Builder()
    f = put.values
    _gpu_features(put, incident, budget, primary, gpu)

    put("engine", incident.engine, *incident.engine_evidence[:1])
    put("recognised", _recognised(incident), *incident.engine_evidence[:1])
    put("engine.family", family(incident.engine), *incident.engine_evidence[:1])
    put("ready", incident.ready is not None, incident.ready)
    where = primary.line if primary else None
    put("failure.present", primary is not None, where)
    put("failure.kind", primary.kind if primary else None, where)
    put("failure.phase", primary.phase if primary else None, where)
    phase, site = judgement.phase, judgement.site
    put("failure.phase_strength", phase.strength if phase else 0.0, phase.line if phase else None)
    rival = judgement.phase_rival
    put("failure.phase_rival", rival.value if rival else None, rival.line if rival else None)
    put("failure.site_strength", site.strength if site else 0.0)
    site_frame = primary.site_frame if primary else None
    put(
        "failure.site",
        primary.site if primary else None,
        where,
        site_frame.line if site_frame else None,
    )
    put("failure.message", primary.message if primary else None, where)
    code = None
    if primary is not None:
        raw = primary.data.get("code")
        raw = primary.data.get("code2") if raw is None else raw
        code = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    put("failure.exit_code", code, where if code is not None else None)
    put("failure.ranks", len(primary.ranks) if primary else 0, where)
    kind = primary.kind if primary else None
    kv_error = [
        fa.line for fa in incident.failures if fa.kind in ("startup_kv_error", "negative_profile")
    ]
    put("startup_kv.error", kind in ("startup_kv_error", "negative_profile"), *kv_error[:3])

    _oom_features(put, incident, primary, judged)

    captures = [fa for fa in incident.failures if fa.kind == "graph_capture_failed"]
    capture_oom = (
        primary is not None and primary.site == "graph_capture" and primary.oom is not None
    )
    put("capture.failed", bool(captures) or capture_oom, *(c.line for c in captures[:2]))
    clues = primary.clues if primary else None
    put(
        "startup.step",
        clues.checkpoint if clues else None,
        clues.checkpoint_line if clues else None,
    )
    put("capture.reason_oom", capture_oom, where if capture_oom else None)
    put("tp_imbalance", kind == "tp_imbalance", where if kind == "tp_imbalance" else None)
    after = _after_retries(incident)
    put("retry.recovered", after is not None, after)
    logical = kind in ("logical_kv_failure", "req_slot_failure")
    put("logical_kv.failed", logical, where if logical else None)
    avail, need = (
        (primary.data.get("available"), primary.data.get("need")) if primary else (None, None)
    )
    enough = isinstance(avail, int) and isinstance(need, int) and avail >= need
    put("logical_kv.tokens_were_available", logical and enough, where if enough else None)

    stats = incident.stats
    put("retraction.count", stats.retractions, stats.first_retraction, stats.last_retraction)
    put(
        "retraction.per_hour",
        stats.retraction_rate,
    )
    t = stats.timeline
    put(
        "timeline.minutes_at_95",
        t.minutes_high,
        *_lines(stats.last_decode.line if stats.last_decode else None),
    )
    put("timeline.span_minutes", t.span_minutes)
    last_stats = stats.last_decode or stats.last_prefill
    put("stats.peak_token_usage", stats.peak_token_usage, last_stats.line if last_stats else None)
    put("host.oom_kill", kind == "host_oom_kill", where if kind == "host_oom_kill" else None)
    put(
        "host.alloc_failure",
        kind == "host_alloc_failure",
        where if kind == "host_alloc_failure" else None,
    )
    put("gpu.fault", kind == "gpu_fault", where if kind == "gpu_fault" else None)

    # Omni wraps encoder failures (the OOM follows in the traceback) and reports dead stages.
    encoder_lines = [
        fa.line
        for fa in incident.facts
        if fa.kind in ("omni_compute_failed", "omni_encode_failed")
        or (fa.kind == "omni_stage_dead" and any(_encoder_stage(n) for n in _stage_names(fa)))
    ]
    put("omni.encoder_failed", bool(encoder_lines), *encoder_lines[:3])
    zero = [
        fa.line for fa in incident.facts_of("omni_stage") if fa.num("encoder_mem_reserve") == 0.0
    ]
    put("omni.encoder_reserve_zero", bool(zero), *zero[:1])
    rl = [r.line for r in incident.facts_of("rl_colocation")]
    stacked = sorted(set(incident.stack) & RL_STACK)
    put("rl.colocated", bool(rl or stacked), *(rl[:2] or incident.engine_evidence[:1]))
    put("stack", ",".join(incident.stack) or None)
    too_long = incident.facts_of("request_too_long")
    put("request.too_long", bool(too_long), *(r.line for r in too_long[:2]))
    below = incident.facts_of("kv_below_context")
    put("kv.below_context", bool(below), *(r.line for r in below[:1]))

    _vllm_features(put, incident, budget, primary)

    b_lines = _budget_lines(incident)
    put("budget.kv_gib", budget.kv_gib, *b_lines)
    put("budget.kv_negative", budget.kv_gib is not None and budget.kv_gib <= 0, *b_lines)
    put("budget.window_empty", budget.window.empty, *b_lines)
    put("budget.weights_share", as_sglang(budget).weights_share, *b_lines)

    for kind_name, count in incident.fact_counts.items():
        facts = incident.facts_of(kind_name)
        name = (
            f"pattern.{kind_name[8:]}" if kind_name.startswith("pattern:") else f"fact.{kind_name}"
        )
        f[name] = Feature(count, tuple(x.line for x in facts[:3]))
    return f


def _oom_features(
    put: _Builder, incident: Incident, primary: Failure | None, judged: OomJudgement | None
) -> None:
    where = primary.line if primary else None
    if judged is None or primary is None:
        put("oom.present", False)
        for name in _OOM_NUMBERS:
            put(f"oom.{name}", None)
        for name in ("foreign_gib", "sibling_gib"):
            put(f"oom.{name}", 0.0)
        for name in _OOM_FLAGS:
            put(f"oom.{name}", False)
        return
    frame = primary.site_frame
    stats = incident.stats
    before = [
        s.line
        for s in (stats.last_prefill, stats.last_decode)
        if s is not None and s.line.seq < primary.line.seq
    ]
    put("oom.present", True, *before[-1:], frame.line if frame else None, where)
    oom, view = judged.message, judged.holders
    put("oom.form", oom.form, where)
    put("oom.requested_gib", oom.requested_gib, where)
    put("oom.free_gib", oom.free_gib, where)
    put("oom.total_gib", oom.total_gib, where)
    put("oom.shortfall_gib", judged.shortfall_gib, where)
    put("oom.self_gib", view.self_gib, where)
    put("oom.foreign_gib", view.foreign_gib, where if view.foreign_gib else None)
    put("oom.sibling_gib", view.sibling_gib, where if view.sibling_gib else None)
    put("oom.unattributed_gib", view.unattributed_gib, where)
    put("oom.hidden_gib", view.hidden_gib, where if view.hidden_gib else None)
    put("oom.foreign_explains", judged.foreign_explains, where if judged.outside_gib else None)
    stage_pids = [f for f in incident.facts if f.kind in ("omni_stage_group", "omni_stage")]
    pipeline = incident.engine in PIPELINE_ENGINES
    may_be_stage = pipeline and view.foreign_gib > 0 and not stage_pids
    put("oom.foreign_may_be_stage", may_be_stage, where if may_be_stage else None)
    for name in ("exceeds_card", "free_covers_request", "self_holds_card"):
        value = getattr(judged, name)
        put(f"oom.{name}", value, where if value else None)
    beside = judged.fit.value == "not_beside_weights"
    put("oom.exceeds_card_minus_weights", beside or judged.exceeds_card, where if beside else None)


#: The OOM features that are numbers (None without an OOM) and flags (False without one).
_OOM_NUMBERS = (
    "form",
    "requested_gib",
    "free_gib",
    "total_gib",
    "shortfall_gib",
    "self_gib",
    "unattributed_gib",
    "hidden_gib",
)
_OOM_FLAGS = (
    "exceeds_card",
    "exceeds_card_minus_weights",
    "foreign_may_be_stage",
    "free_covers_request",
    "foreign_explains",
    "self_holds_card",
)


def _gpu_features(
    put: _Builder, incident: Incident, budget: Budget, primary: Failure | None, gpu: GpuView | None
) -> None:
    available = gpu is not None and gpu.snapshot is not None
    put("gpu.available", available)
    foreign = [h for h in gpu.foreign if h.gib] if gpu is not None else []
    if gpu is not None and gpu.failing_device is not None:
        foreign = [h for h in foreign if h.device is gpu.failing_device]
    where = primary.line if primary else None
    put("gpu.foreign_gib", sum(h.gib or 0.0 for h in foreign), where if foreign else None)
    explained = gpu is not None and available and gpu.foreign_explains
    put("gpu.foreign_explains", explained, where if explained else None)
    gaps = [g for _, g in gpu.unattributed] if gpu is not None else []
    put("gpu.unattributed_gib", max(gaps) if gaps else None)
    put("gpu.snapshot_gap_s", gpu.gap_s if gpu is not None else None)
    capacity = gpu.capacity_gib if gpu is not None else None
    if capacity is None and primary is not None and primary.oom is not None:
        capacity = primary.oom.total_gib
    gap = start_gap(capacity, budget)
    evidence = _budget_lines(incident)[1:2]
    put("cotenant.start_gap_gib", gap, *evidence)
    gap_explains = start_gap_explains(gap, budget)
    put("cotenant.start_gap_explains", gap_explains, *(evidence if gap_explains else ()))


def _vllm_features(
    put: _Builder, incident: Incident, budget: Budget, primary: Failure | None
) -> None:
    kind = primary.kind if primary else None
    where = primary.line if primary else None
    check = kind in ("startup_free_memory", "profiling_free_changed")
    put("vllm.cotenant_check", check, where if check else None)
    short = budget.startup_short_gib if isinstance(budget, VllmBudget) else None
    put("vllm.startup_short_gib", short, where if short is not None else None)
    total = primary.data.get("total") if primary is not None else None
    steps = (
        round(short / (0.01 * total), 2)
        if short is not None and isinstance(total, int | float) and total > 0
        else None
    )
    put("vllm.startup_short_steps", steps, where if steps is not None else None)
    mm = incident.facts_of("vllm_mm_profile")
    put("vllm.mm_profile", bool(mm), *(m.line for m in mm[:1]))
    in_profile = False
    if primary is not None and primary.oom is not None and family(incident.engine) == "vllm":
        # vLLM starts: weights, then the profile run (a dummy forward, sampler, encoder), then
        # the KV cache, then graph capture; an OOM at startup outside those three is the profile
        kv_lines = [f for f in incident.facts_of("vllm_kv") if f.line.seq < primary.line.seq]
        in_profile = (
            primary.phase == "startup"
            and primary.site not in ("weights", "kv_pool", "graph_capture", "resume")
            and not kv_lines
        )
    put("vllm.profile_run_oom", in_profile, where if in_profile else None)
    preempted = [f for f in incident.facts_of("retraction") if f.data.get("mode")]
    put(
        "vllm.preemptions",
        incident.stats.preempted if preempted else 0,
        *(p.line for p in preempted[:2]),
    )


def _after_retries(incident: Incident) -> Line | None:
    """The first line after the last allocator retry warning that shows the process went on."""
    retries = [f.line.seq for f in incident.facts if f.kind in RETRY_KINDS]
    if not retries:
        return None
    last = max(retries)
    stats = incident.stats
    later = [
        f.line
        for f in (*incident.facts, stats.last_prefill, stats.last_decode)
        if f is not None and f.line.seq > last and f.kind not in RETRY_KINDS
    ]
    return min(later, key=lambda ln: ln.seq) if later else None


def _stage_names(fact: Fact) -> list[str]:
    """The stage names an Omni dead-stage line gives (`asr (pid=..., exit=1), talker (...)`)."""
    names = [fact.text("stage"), fact.text("stage2")]
    listed = fact.text("stages") or ""
    names.extend(part.split("(")[0].strip() for part in listed.split(","))
    return [n for n in names if n]


def _encoder_stage(name: str) -> bool:
    """An encoder-like stage (image/audio encoder, ASR, vocoder) by the generated stage table,
    else by what its name says (knowledge/code.py)."""
    from oomdoctor.knowledge import code

    return code.stage_role(name) == "encoder" or code.name_heuristic("", name) == "encoder"


def _budget_lines(incident: Incident) -> tuple[Line, ...]:
    out: list[Line] = []
    for r in incident.ranks:
        for m in (r.pre, r.post):
            if m is not None:
                out.append(m.line)
        if out:
            break
    if incident.server_args_line is not None:
        out.insert(0, incident.server_args_line)
    return tuple(out)
