"""The report: a JSON-compatible dict built from a Diagnosis (schema of DESIGN §5).

All three output formats render this one dict, after redaction, so they always agree; the
redaction count is of what the chosen format prints. Log text is cut here only where no secret is
split (``secrets.cut``), so the redaction that follows masks every secret whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oomdoctor import __version__
from oomdoctor.budget import card
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.judge.holders import top
from oomdoctor.knowledge import family
from oomdoctor.model import Failure, Line, SglangBudget
from oomdoctor.report import picture
from oomdoctor.report.budget_json import budget_dict
from oomdoctor.report.judgement_json import judgement_dict
from oomdoctor.report.secrets import cut

if TYPE_CHECKING:
    from oomdoctor.gpu.view import GpuView

SCHEMA_VERSION = 1
MAX_EVIDENCE_TEXT = 400
MAX_MESSAGE_TEXT = 1000
OOM_DIGITS = 6
#: server_args fields worth showing in a memory report (the rest stays in the log).
MEMORY_ARGS = (
    "model_path",
    "tp_size",
    "pp_size",
    "dp_size",
    "ep_size",
    "enable_dp_attention",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "max_total_tokens",
    "context_length",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
    "disable_cuda_graph",
    "kv_cache_dtype",
    "page_size",
    "quantization",
    "dtype",
    "speculative_algorithm",
    "enable_memory_saver",
    "base_gpu_id",
    "gpu_id_step",
)


def _r(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def line_ref(line: Line, sources: tuple[str, ...], note: str | None = None) -> dict[str, Any]:
    # cut where no secret is split: redaction, later, then masks each one whole
    text = cut(line.raw.rstrip("\n"), MAX_EVIDENCE_TEXT)
    ref: dict[str, Any] = {
        "source": sources[line.source] if line.source < len(sources) else None,
        "line": line.number,
        "rank": line.rank,
        "text": text,
    }
    if note:
        ref["note"] = note
    return ref


def _failure_dict(f: Failure | None, sources: tuple[str, ...]) -> dict[str, Any] | None:
    if f is None:
        return None
    out: dict[str, Any] = {
        "kind": f.kind,
        "phase": f.phase,
        "site": f.site,
        "stage": f.stage,
        "ranks": list(f.ranks),
        "message": cut(f.message, MAX_MESSAGE_TEXT, mark=""),
        "where": line_ref(f.line, sources),
        "frames": [
            {"path": fr.path, "line": fr.lineno, "function": fr.func} for fr in f.frames[-12:]
        ],
        "oom": None,
    }
    if f.oom is not None:
        o = f.oom
        shown = top(o.processes, lambda p: p[1])
        out["oom"] = {
            "form": o.form,
            # as the message printed them: MiB figures need six decimals of GiB to survive
            "requested_gib": _r(o.requested_gib, OOM_DIGITS),
            "gpu": o.gpu,
            "total_gib": _r(o.total_gib, OOM_DIGITS),
            "free_gib": _r(o.free_gib, OOM_DIGITS),
            "this_process_gib": _r(o.this_process_gib, OOM_DIGITS),
            "processes": [
                {"pid": pid, "gib": _r(gib, OOM_DIGITS)}
                for pid, gib in (o.processes[i] for i in shown.kept)
            ],
            "allocated_gib": _r(o.allocated_gib, OOM_DIGITS),
            "private_pools_gib": _r(o.private_pools_gib, OOM_DIGITS),
            "reserved_unallocated_gib": _r(o.reserved_unallocated_gib, OOM_DIGITS),
            "complete": o.complete,
        }
        if shown.more:  # the largest are listed, however many the message names
            out["oom"]["processes_more"] = {"count": shown.more, "gib": _r(shown.more_gib)}
    return out


def gpu_dict(view: GpuView | None) -> dict[str, Any]:
    """The GPU section: devices, processes with their roles, or why there is no snapshot."""
    if view is None or view.snapshot is None:
        reason = view.unavailable if view is not None else None
        return {
            "available": False,
            "reason": reason.reason if reason else "not read",
            "hint": reason.hint if reason else None,
            "devices": [],
            "processes": [],
        }
    snap = view.snapshot
    gaps = {id(d): g for d, g in view.unattributed}
    shown = top(view.holders, lambda h: h.gib, always=lambda h: h.role != "foreign")
    out = {
        "available": True,
        "source": snap.source,
        "time": snap.time,
        "host": snap.host,
        "driver_version": snap.driver_version,
        "cuda_version": snap.cuda_version,
        "mapping": view.mapping,
        "snapshot_gap_s": _r(view.gap_s, 0),
        "devices": [
            {
                "index": d.index,
                "uuid": d.uuid,
                "pci_bus_id": d.pci_bus_id,
                "name": d.name,
                "total_gib": _gib(d.total_bytes),
                "used_gib": _gib(d.used_bytes),
                "free_gib": _gib(d.free_bytes),
                "reserved_gib": _gib(d.reserved_bytes),
                "mig_mode": d.mig_mode,
                "server": d in view.server_devices,
                "failing": d is view.failing_device,
                "unattributed_gib": _r(gaps.get(id(d))),
            }
            for d in snap.devices
        ],
        "processes": [
            {
                "pid": h.pid,
                "gpu_uuid": h.device.uuid if h.device else None,
                "gpu_index": h.device.index if h.device else None,
                "used_bytes": None if h.gib is None else round(h.gib * (1 << 30)),
                "used_gib": _r(h.gib),
                "name": h.name,
                "is_server": h.role == "server",
                "role": h.role,
                "why": h.why,
                "kv_cost_gib": _r(h.kv_cost_gib),
                "present_at_start": h.present_at_start,
            }
            for h in (view.holders[i] for i in shown.kept)
        ],
    }
    if shown.more:  # the largest are listed, however many the snapshot holds
        out["processes_more"] = {"count": shown.more, "gib": _r(shown.more_gib)}
    return out


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / (1 << 30), 2)


def picture_dict(diag: Diagnosis) -> dict[str, Any] | None:
    """The card before and after the recommended fraction (None when the log lacks the numbers)."""
    b = diag.budget
    if not isinstance(b, SglangBudget):
        return None  # the picture is SGLang's split of the card (vLLM has no pre/post)
    around = card.surroundings(b, diag.gpu)
    before = picture.segments(card.card_at(b, b.mem_fraction_static, around))
    if before is None:
        return None
    # the card after fix 1, as the diff shows it: never after a later fix or a fallback (a
    # picture of all of them at once would show a launch nobody recommended)
    fix = diag.actions[0] if diag.actions else None
    rec = (
        fix.value
        if fix is not None
        and fix.flag
        and fix.flag.replace("_", "-").endswith("mem-fraction-static")
        and isinstance(fix.value, float)
        else None
    )
    after = picture.segments(card.card_at(b, rec, around)) if rec is not None else None
    return {"before": before, "after": after, "svg": None}


def timeline_dict(diag: Diagnosis) -> dict[str, Any] | None:
    t = diag.incident.stats.timeline
    if not t.points:
        return None
    return {
        "first_ts": t.first_ts,
        "last_ts": t.last_ts,
        "span_s": _r(t.span_s, 0),
        "peak_usage": t.peak_usage,
        "minutes_at_95": t.minutes_high,
        "retractions": t.retractions,
        "retractions_per_hour": _r(t.retractions_per_hour, 1),
        "usage": [round(p.usage, 2) for p in t.points],
    }


def build_report(diag: Diagnosis) -> dict[str, Any]:
    inc = diag.incident
    sources = inc.sources
    v = diag.verdict
    primary = inc.primary
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "oomdoctor", "version": __version__},
        "input": {
            "sources": list(sources),
            "lines_read": inc.lines_read,
            "engine": inc.engine,
            "engine_family": family(inc.engine),
            "engine_evidence": inc.engine_why,
            "stack": list(inc.stack),
            "sglang_version": inc.version.label,
        },
        "verdict": {
            "category": v.category,
            "confidence": v.confidence,
            "summary": v.summary,
            "rule": v.rule,
            **({"rule_source": v.rule_source} if v.rule_source else {}),  # a --rules rule's file
            **{k: v.explanation.get(k) for k in ("what", "why", "remedy")},
            "alternatives": [
                {"category": a.category, "confidence": a.confidence, "question": a.question}
                for a in v.alternatives
            ],
        },
        "judgement": judgement_dict(diag),
        "failure": _failure_dict(primary, sources),
        "actions": [
            {
                "flag": a.flag,
                "direction": a.direction,
                "value": a.value,
                "current": a.current,
                "text": a.text,
                "basis": a.basis,
                "alternative": a.alternative,
            }
            for a in diag.actions
        ],
        "findings": [
            {
                "rule": f.rule.id,
                "category": f.rule.category,
                "priority": f.rule.priority,
                "confidence": f.rule.confidence,
                "title": f.rule.title,
                "evidence": [line_ref(e.line, sources, e.note) for e in f.evidence],
            }
            for f in diag.findings
        ],
        "budget": budget_dict(diag.budget),
        "server_args": {k: inc.server_args[k] for k in MEMORY_ARGS if k in inc.server_args},
        "stats": {
            "prefill_lines": inc.stats.prefill_lines,
            "decode_lines": inc.stats.decode_lines,
            "peak_token_usage": inc.stats.peak_token_usage,
            "retractions": inc.stats.retractions,
            "retracted_requests": inc.stats.retracted_requests,
        },
        "gpu": gpu_dict(diag.gpu),
        "capture": dict(diag.capture) if diag.capture else None,
        "picture": picture_dict(diag),
        "timeline": timeline_dict(diag),
        "notices": list(diag.notices),
        "redactions": 0,
    }
