"""The flat view of an incident that rule conditions read: ``name → value (+ evidence lines)``.

Rules never see the incident itself; they see these named values. Every feature that a rule
can use is listed in FEATURE_DOCS (``oomdoctor rules features`` prints them), so rule files are
validated against real names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.budget import as_sglang
from oomdoctor.budget.costs import start_gap, start_gap_explains
from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.knowledge import family
from oomdoctor.knowledge.kinds import RETRY_KINDS
from oomdoctor.model import Budget, Failure, Incident, Line, Scalar, VllmBudget

if TYPE_CHECKING:  # the GPU modules load only when there is a GPU state to look at
    from oomdoctor.gpu.view import GpuView
    from oomdoctor.judge import Judgement
    from oomdoctor.judge.oom import OomJudgement

#: Parts of the stack that mean an RL trainer shares the GPUs with the engine.
#: (vLLM's sleep mode alone is not one: single servers use it too.)
RL_STACK = frozenset({"verl", "slime", "openrlhf", "torch_memory_saver"})
#: Engines whose stages are separate processes sharing GPUs by design.
PIPELINE_ENGINES = frozenset({"sglang-omni", "vllm-omni"})

_ENCODER_STAGE = LazyPattern(
    r"asr|encoder|vision|visual|image|audio|video|vocoder|code2wav|vit", re.I
)


class Feature(NamedTuple):
    value: Scalar
    evidence: tuple[Line, ...] = ()


FEATURE_DOCS: Mapping[str, str] = MappingProxyType(
    {
        "engine": "sglang, sglang-omni, vllm, vllm-omni, vllm-ascend or null (cannot tell)",
        "engine.family": "sglang or vllm (whose flags the advice uses), or null",
        "recognised": "the input holds lines oomdoctor knows (an engine's, PyTorch's, a traceback)",
        "ready": "the server printed `fired up and ready to roll`",
        "failure.present": "the log shows a failure of any kind",
        "failure.kind": "kind of the diagnosed failure (cuda_oom, startup_kv_error, ...)",
        "failure.phase": "startup, warmup, running or unknown",
        "failure.site": "where it failed: weights, kv_pool, graph_capture, encoder, logits, "
        "sampling, comm, forward, unknown",
        "failure.phase_strength": "how firmly the log says when it failed: 0 (nothing says) to 1 "
        "(in so many words); 0.45 is the OOM message's private-pool clue alone",
        "failure.phase_rival": "the phase a weaker source of the log says, when it disagrees",
        "failure.site_strength": "how firmly the log says where it failed: 0 to 1 (0.6: a name "
        "heuristic, 0.85: a known frame or text)",
        "failure.message": "the failure's message text",
        "failure.exit_code": "the exit code a died process reported (negative: killed by that "
        "signal; -9 is SIGKILL, the host OOM killer's)",
        "failure.ranks": "how many ranks printed the failure",
        "startup_kv.error": "SGLang refused to build the KV pool (not enough memory / negative profile)",
        "oom.present": "the diagnosed failure is a GPU out-of-memory (any form)",
        "oom.form": "pytorch, pytorch_legacy, cuda_error, cublas, nccl, triton",
        "oom.requested_gib": "the allocation that failed",
        "oom.free_gib": "free memory on the GPU at that moment",
        "oom.total_gib": "the GPU's capacity as PyTorch saw it",
        "oom.shortfall_gib": "requested − free",
        "oom.self_gib": "memory the failing process held",
        "oom.foreign_gib": "memory held by other processes that are not this server",
        "oom.sibling_gib": "memory held by sibling stages of the same pipeline (Omni)",
        "oom.unattributed_gib": "used memory no listed process accounts for",
        "oom.hidden_gib": "used memory held outside every listed process, beyond this process's own "
        "non-PyTorch allowance when the message does not size this process (0 bytes, no NVML, 1.x)",
        "oom.exceeds_card": "the single allocation is at least the GPU's whole capacity",
        "oom.free_covers_request": "the message shows far more memory free than was requested "
        "(twice the request and 4 GiB more)",
        "oom.foreign_may_be_stage": "a pipeline engine (SGLang Omni, vLLM-Omni) whose log names no stage "
        "PIDs: the other holders may be its own stages",
        "oom.foreign_explains": "the foreign holders alone account for the shortfall",
        "oom.self_holds_card": "the failing process holds nearly all used memory",
        "startup.step": "the last startup checkpoint the failing rank printed before the failure: "
        "load_begin, load_end, kv_allocated, pool_end, graph_begin, graph_end, or null",
        "capture.failed": "a CUDA-graph capture failed",
        "capture.reason_oom": "the capture failed for lack of memory",
        "tp_imbalance": "SGLang's TP memory-imbalance check fired",
        "retry.recovered": "after the last allocator retry warning the log goes on (stats, a ready "
        "line, other lines of the engine): the retried allocation succeeded",
        "logical_kv.failed": "the scheduler's KV-slot accounting failed (Prefill/Decode out of memory)",
        "logical_kv.tokens_were_available": "that failure reported enough available tokens",
        "retraction.count": "KV-pool retractions in the log",
        "retraction.per_hour": "retractions per hour over the span they cover",
        "stats.peak_token_usage": "highest `token usage` in the stats lines",
        "timeline.minutes_at_95": "minutes the stats lines show token usage at 0.95 or more",
        "timeline.span_minutes": "minutes between the first and the last stats line",
        "host.oom_kill": "a process was killed by the host OOM killer (exit −9)",
        "host.alloc_failure": "host memory allocation failed (Errno 12 and similar)",
        "gpu.fault": "a GPU error that is not exhaustion (illegal access, no kernel image, ...)",
        "omni.encoder_failed": "an Omni encoder stage failed or died",
        "omni.encoder_reserve_zero": "the Omni thinker ran with encoder_mem_reserve=0",
        "rl.colocated": "the server runs next to an RL trainer (memory saver, sleep mode, verl, slime, "
        "OpenRLHF)",
        "stack": "what runs around the engine, comma-separated (verl, torch_memory_saver, ray, ...)",
        "request.too_long": "a request was longer than the KV pool or context allows",
        "kv.below_context": "SGLang warned the KV pool is smaller than the context length",
        "gpu.available": "a GPU snapshot (live or from --snapshot) was read",
        "gpu.foreign_gib": "memory co-tenants hold on the server's (failing) GPU in the snapshot",
        "gpu.foreign_explains": "the snapshot's co-tenants account for the failure",
        "gpu.unattributed_gib": "used memory on a server GPU that no listed process accounts for",
        "gpu.snapshot_gap_s": "seconds from the log's last line to the snapshot",
        "cotenant.start_gap_gib": "capacity − pre − context overhead: memory held by others at start",
        "cotenant.start_gap_explains": "that memory, at y, would have covered the missing KV pool",
        "budget.kv_gib": "post − (1 − y)·pre",
        "budget.kv_negative": "that KV figure is ≤ 0",
        "budget.window_empty": "no --mem-fraction-static satisfies both KV need and runtime reserve",
        "budget.weights_share": "weights / pre",
        "vllm.cotenant_check": "vLLM's own check saw memory held or released by another process "
        "(free memory below the requested utilization at startup, or free memory that changed "
        "during profiling)",
        "vllm.profile_run_oom": "the OOM happened in vLLM's startup profile run (before the KV cache)",
        "vllm.mm_profile": "vLLM profiled a multimodal encoder (dummy images/videos/audio)",
        "vllm.startup_short_gib": "how much more vLLM's start-up check asked for than was free (GiB)",
        "vllm.preemptions": "requests vLLM preempted for lack of KV cache space",
        "fact.<kind>": "how many facts of a kind were seen (e.g. fact.retraction)",
        "pattern.<rule id>.<name>": "how many lines a rule's own pattern matched",
    }
)


def _recognised(incident: Incident) -> bool:
    known = {k for k in incident.fact_counts if k not in ("marker", "oom_part")}
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
        or (fa.kind == "omni_stage_dead" and _ENCODER_STAGE.search(fa.line.text))
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


#: Frames and texts of vLLM's startup profile run (the dummy forward that sizes the KV cache).
_PROFILE_RUN = LazyPattern(
    r"determine_num_available_blocks|determine_available_memory|profile_run|_dummy_run"
    r"|_dummy_sampler_run|profile_num_available_blocks"
)


def _vllm_features(
    put: _Builder, incident: Incident, budget: Budget, primary: Failure | None
) -> None:
    kind = primary.kind if primary else None
    where = primary.line if primary else None
    check = kind in ("startup_free_memory", "profiling_free_changed")
    put("vllm.cotenant_check", check, where if check else None)
    short = budget.startup_short_gib if isinstance(budget, VllmBudget) else None
    put("vllm.startup_short_gib", short, where if short is not None else None)
    mm = incident.facts_of("vllm_mm_profile")
    put("vllm.mm_profile", bool(mm), *(m.line for m in mm[:1]))
    in_profile = False
    if primary is not None and primary.oom is not None and family(incident.engine) == "vllm":
        texts = [primary.line.text, *(f"{fr.path}:{fr.func}" for fr in primary.frames)]
        kv_lines = [f for f in incident.facts_of("vllm_kv") if f.line.seq < primary.line.seq]
        in_profile = any(_PROFILE_RUN.search(t) for t in texts) or (
            primary.phase == "startup" and not kv_lines and bool(mm)
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
