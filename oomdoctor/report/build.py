"""The report: a JSON-compatible dict built from a Diagnosis (schema of DESIGN §5).

All three output formats render this one dict, after redaction, so they always agree and the
redaction count covers everything that is printed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oomdoctor import __version__
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.knowledge import family
from oomdoctor.model import Budget, Failure, Line, SglangBudget, VllmBudget, Window
from oomdoctor.report import picture

if TYPE_CHECKING:
    from oomdoctor.gpu.view import GpuView

SCHEMA_VERSION = 1
MAX_EVIDENCE_TEXT = 400
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
    text = line.raw.rstrip("\n")
    if len(text) > MAX_EVIDENCE_TEXT:
        text = text[:MAX_EVIDENCE_TEXT] + "…"
    ref: dict[str, Any] = {
        "source": sources[line.source] if line.source < len(sources) else None,
        "line": line.number,
        "rank": line.rank,
        "text": text,
    }
    if note:
        ref["note"] = note
    return ref


#: The budget object of the JSON contract: every key is always present (null when unknown).
_SGLANG_KEYS = (
    "rank",
    "stage",
    "gpu",
    "pre_gib",
    "post_gib",
    "mem_fraction_static",
    "mem_fraction_source",
    "fraction_factor",
    "static_gib",
    "dynamic_gib",
    "kv_logged_gib",
    "headroom_gib",
    "y_zero",
    "y_min",
    "y_min_basis",
    "y_max",
    "y_max_basis",
    "reserve_gib",
)
_VLLM_KEYS = (
    "gpu_memory_utilization",
    "utilization_source",
    "budget_gib",
    "activation_gib",
    "non_torch_gib",
    "max_model_len",
    "kv_needed_gib",
    "u_min",
    "u_min_basis",
    "u_max",
    "u_max_basis",
)
_ORDER = (
    "engine",
    "rank",
    "stage",
    "gpu",
    "pre_gib",
    "post_gib",
    "weights_gib",
    "mem_fraction_static",
    "mem_fraction_source",
    "fraction_factor",
    "static_gib",
    "dynamic_gib",
    "kv_gib",
    "kv_logged_gib",
    "kv_tokens",
    "bytes_per_token",
    "context_len",
    "graph_gib",
    "headroom_gib",
    "capacity_gib",
    "y_zero",
    "y_min",
    "y_min_basis",
    "y_max",
    "y_max_basis",
    "reserve_gib",
    "gpu_memory_utilization",
    "utilization_source",
    "budget_gib",
    "activation_gib",
    "non_torch_gib",
    "max_model_len",
    "kv_needed_gib",
    "u_min",
    "u_min_basis",
    "u_max",
    "u_max_basis",
    "window_empty",
    "ranks",
)


def budget_dict(b: Budget) -> dict[str, Any]:
    """One object for both engines (DESIGN §5): vLLM fills its own keys and leaves the SGLang
    ones (pre/post/y) null, and the other way round."""
    shared = {
        "engine": b.engine,
        "weights_gib": _r(b.weights_gib),
        "kv_gib": _r(b.kv_gib),
        "kv_tokens": b.kv_tokens,
        "bytes_per_token": b.bytes_per_token,
        "graph_gib": _r(b.graph_gib),
        "capacity_gib": _r(b.capacity_gib),
        "window_empty": b.window.empty,
    }
    own = _sglang_part(b) if isinstance(b, SglangBudget) else _vllm_part(b)
    out = {**dict.fromkeys(_SGLANG_KEYS + _VLLM_KEYS), "fraction_factor": 1.0, **shared, **own}
    out.setdefault("ranks", [])
    return {key: out[key] for key in _ORDER}


def _window(w: Window, name: str) -> dict[str, Any]:
    return {
        f"{name}_min": _r(w.low, 4),
        f"{name}_min_basis": w.low_basis,
        f"{name}_max": _r(w.high, 4),
        f"{name}_max_basis": w.high_basis,
    }


def _sglang_part(b: SglangBudget) -> dict[str, Any]:
    return {
        "rank": b.rank,
        "stage": b.stage,
        "gpu": b.gpu,
        "pre_gib": _r(b.pre_gib),
        "post_gib": _r(b.post_gib),
        "mem_fraction_static": b.mem_fraction_static,
        "mem_fraction_source": b.mem_fraction_source,
        "fraction_factor": b.fraction_factor,
        "static_gib": _r(b.static_gib),
        "dynamic_gib": _r(b.dynamic_gib),
        "kv_logged_gib": _r(b.kv_logged_gib),
        "context_len": b.context_len,
        "headroom_gib": _r(b.headroom_gib),
        "y_zero": _r(b.y_zero, 4),
        **_window(b.window, "y"),
        "reserve_gib": _r(b.reserve_gib),
        "ranks": [
            {
                "rank": r.rank,
                "stage": r.stage,
                "gpu": r.gpu,
                "mem_fraction_static": r.mem_fraction_static,
                "pre_gib": _r(r.pre_gib),
                "post_gib": _r(r.post_gib),
                "weights_gib": _r(r.weights_gib),
                "kv_gib": _r(r.kv_gib),
                "kv_logged_gib": _r(r.kv_logged_gib),
            }
            for r in b.ranks
        ],
    }


def _vllm_part(b: VllmBudget) -> dict[str, Any]:
    return {
        "gpu_memory_utilization": b.gpu_memory_utilization,
        "utilization_source": b.utilization_source,
        "budget_gib": _r(b.budget_gib),
        "activation_gib": _r(b.activation_gib),
        "non_torch_gib": _r(b.non_torch_gib),
        "max_model_len": b.max_model_len,
        "context_len": b.max_model_len,  # the context a request may use
        "kv_needed_gib": _r(b.kv_needed_gib),
        **_window(b.window, "u"),
    }


def _failure_dict(f: Failure | None, sources: tuple[str, ...]) -> dict[str, Any] | None:
    if f is None:
        return None
    out: dict[str, Any] = {
        "kind": f.kind,
        "phase": f.phase,
        "site": f.site,
        "stage": f.stage,
        "ranks": list(f.ranks),
        "message": f.message[:1000],
        "where": line_ref(f.line, sources),
        "frames": [
            {"path": fr.path, "line": fr.lineno, "function": fr.func} for fr in f.frames[-12:]
        ],
        "oom": None,
    }
    if f.oom is not None:
        o = f.oom
        out["oom"] = {
            "form": o.form,
            "requested_gib": _r(o.requested_gib, 3),
            "gpu": o.gpu,
            "total_gib": _r(o.total_gib),
            "free_gib": _r(o.free_gib, 3),
            "this_process_gib": _r(o.this_process_gib),
            "processes": [{"pid": pid, "gib": _r(gib)} for pid, gib in o.processes],
            "allocated_gib": _r(o.allocated_gib),
            "private_pools_gib": _r(o.private_pools_gib),
            "reserved_unallocated_gib": _r(o.reserved_unallocated_gib),
            "complete": o.complete,
        }
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
    return {
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
            for h in view.holders
        ],
    }


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / (1 << 30), 2)


def picture_dict(diag: Diagnosis) -> dict[str, Any] | None:
    """The card before and after the recommended fraction (None when the log lacks the numbers)."""
    b = diag.budget
    if not isinstance(b, SglangBudget):
        return None  # the picture is SGLang's split of the card (vLLM has no pre/post)
    capacity = b.capacity_gib
    view = diag.gpu
    if capacity is None and view is not None and view.snapshot is not None:
        dev = view.failing_device or (view.server_devices[0] if view.server_devices else None)
        capacity = dev.total_bytes / (1 << 30) if dev is not None and dev.total_bytes else None
    held = capacity - b.pre_gib if capacity is not None and b.pre_gib is not None else None
    others = None  # co-tenants there at start, when the snapshot names them
    if view is not None and view.snapshot is not None:
        others = sum(h.gib or 0.0 for h in view.foreign if h.present_at_start) or None
    before = picture.segments(b, b.mem_fraction_static, capacity, held, others)
    if before is None:
        return None
    rec = next(
        (
            a.value
            for a in diag.actions
            if a.flag
            and a.flag.replace("_", "-").endswith("mem-fraction-static")
            and isinstance(a.value, float)
        ),
        None,
    )
    after = picture.segments(b, rec, capacity, held, others) if rec is not None else None
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
        "minutes_at_95": round(t.seconds_high / 60, 1),
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
            **{k: v.explanation.get(k) for k in ("what", "why", "remedy")},
        },
        "failure": _failure_dict(primary, sources),
        "actions": [
            {
                "flag": a.flag,
                "direction": a.direction,
                "value": a.value,
                "current": a.current,
                "text": a.text,
                "basis": a.basis,
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
