"""What every format shows on its first screen, computed once from the report dict: the change as
a launch-flag diff, the figures the OOM message itself gives, and the budget rows the log fills.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any, NamedTuple

from oomdoctor.budget.recommend import window_text
from oomdoctor.report.labels import one_line
from oomdoctor.units import size

#: What the diff block is called: it shows fix 1 only, never a merge of several actions.
CHANGE_LABEL = "Fix 1 as a launch-flag diff:"


def change_lines(actions: list[dict[str, Any]]) -> list[str]:
    """The changes of the first action, and of it only: ``- --flag old`` / ``+ --flag new``; an
    environment variable (a flag without ``--``) reads ``+ NAME=value``. Nothing when fix 1 has
    no flag or no value (it then comes first as text): the later actions are other fixes or
    alternatives, and merging them would show a launch nobody recommended. Values can be
    server_args strings from the log: each line stays one line (a newline shows as ``␊``)."""
    first = actions[0] if actions else {}
    flag, value = first.get("flag"), first.get("value")
    if not flag or value is None or first.get("alternative"):
        return []
    if not flag.startswith("-"):
        return [one_line(f"+ {flag}={value}")]
    out: list[str] = []
    if first.get("current") is not None:
        out.append(one_line(f"- {flag} {_value(first['current'])}"))
    out.append(one_line(f"+ {flag} {_value(value)}"))
    return out


def alternatives_label(before: int) -> str:
    """The heading above the actions that replace the ``before`` ones above them."""
    return "Alternatives, instead of " + ("fix 1:" if before == 1 else "the fixes above:")


def first_alternative(actions: list[dict[str, Any]]) -> int | None:
    """The index of the first action that is an alternative to those before it (an "Or ..."),
    after which the report lists the alternatives under their own heading; None when none is."""
    return next((i for i, a in enumerate(actions) if i and a.get("alternative")), None)


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if round(v, 2) == round(v, 4) else f"{v:.3f}"
    return str(v)


class OomRows(NamedTuple):
    """The OOM message's own figures, as it states them (none invented): the failed request,
    and what the card held."""

    request: list[tuple[str, str]]
    card: list[tuple[str, str]]

    def __bool__(self) -> bool:
        return bool(self.request or self.card)


#: How the OOM table names a listed process whose owner the judgement decided.
_WHOSE = MappingProxyType(
    {"self": " (this server)", "sibling": " (a stage)", "peer": " (a peer rank)", "foreign": ""}
)


def oom_rows(failure: dict[str, Any] | None, judgement: dict[str, Any] | None = None) -> OomRows:
    """The OOM message's figures; each listed process says whose it is where the judgement
    stage decided (a container prints the server itself as `Process N`)."""
    oom = (failure or {}).get("oom")
    roles = {
        h["pid"]: h["role"] for h in (judgement or {}).get("holders") or () if h["pid"] is not None
    }
    rows = OomRows([], [])
    if not oom:
        return rows
    requested, free = oom.get("requested_gib"), oom.get("free_gib")
    if requested is not None:
        rows.request.append(("requested", size(requested)))
    if free is not None:
        rows.request.append(("free", size(free)))
        if requested is not None and requested > free:
            rows.request.append(("short", size(requested - free)))
    if oom.get("total_gib") is not None:
        gpu = f"GPU {oom['gpu']} " if oom.get("gpu") is not None else ""
        rows.card.append((f"{gpu}total", size(oom["total_gib"])))
    if oom.get("this_process_gib") is not None:
        rows.card.append(("this process", size(oom["this_process_gib"])))
    for p in oom.get("processes") or []:
        gib = p["gib"]
        whose = _WHOSE.get(roles.get(p["pid"], ""), "")
        rows.card.append((f"process {p['pid']}{whose}", size(gib) if gib is not None else "in use"))
    if oom.get("processes_more"):
        more = oom["processes_more"]
        rows.card.append((f"{more['count']} more processes", size(more["gib"])))
    for key, label in (
        ("allocated_gib", "allocated by PyTorch"),
        ("private_pools_gib", "in private pools (CUDA graphs)"),
        ("reserved_unallocated_gib", "reserved by PyTorch, unallocated"),
    ):
        if oom.get(key) is not None:
            rows.card.append((label, size(oom[key])))
    return rows


def budget_rows(b: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    if b.get("engine") == "vllm":
        return "memory budget (vLLM)", [
            ("total GPU memory", gib_text(b["capacity_gib"])),
            ("--gpu-memory-utilization (u)", num_text(b["gpu_memory_utilization"])),
            ("vLLM's budget total × u", gib_text(b["budget_gib"])),
            ("weights", gib_text(b["weights_gib"])),
            ("activation peak (profile run)", gib_text(b["activation_gib"])),
            ("non-torch memory", gib_text(b["non_torch_gib"])),
            (
                "KV cache",
                gib_text(b["kv_gib"])
                + (f" ({b['kv_tokens']:,} tokens)" if b.get("kv_tokens") else ""),
            ),
            ("max_model_len", f"{b['max_model_len']:,}" if b.get("max_model_len") else "unknown"),
            ("KV for one max_model_len request", gib_text(b["kv_needed_gib"])),
            ("CUDA graphs (outside the budget)", gib_text(b["graph_gib"])),
            (
                "window u_min – u_max",
                window_text(b["u_min"], b["u_max"], b["gpu_memory_utilization"]),
            ),
        ]
    if b.get("stage"):
        gpu = f", GPU {b['gpu']}" if b.get("gpu") is not None else ""
        title = f"memory budget (stage {b['stage']}{gpu})"
    else:
        title = "memory budget" + (f" (tightest rank: {b['rank']})" if b.get("rank") else "")
    return title, [
        ("free before weights (pre)", gib_text(b["pre_gib"])),
        ("free after weights (post)", gib_text(b["post_gib"])),
        ("weights", gib_text(b["weights_gib"])),
        ("--mem-fraction-static (y)", num_text(b["mem_fraction_static"])),
        ("static share y·pre", gib_text(b["static_gib"])),
        ("dynamic share (1−y)·pre", gib_text(b["dynamic_gib"])),
        ("KV pool, computed", gib_text(b["kv_gib"])),
        (
            "KV pool, logged",
            gib_text(b["kv_logged_gib"])
            + (f" ({b['kv_tokens']:,} tokens)" if b.get("kv_tokens") else ""),
        ),
        (
            "KV bytes per token",
            f"{b['bytes_per_token']:,}" if b.get("bytes_per_token") else "unknown",
        ),
        ("CUDA graphs", gib_text(b["graph_gib"])),
        ("headroom after startup", gib_text(b["headroom_gib"])),
        ("y at which the KV pool is 0", num_text(b["y_zero"])),
        (
            "window y_min – y_max",
            window_text(b["y_min"], b["y_max"], b["mem_fraction_static"]),
        ),
    ]


def gib_text(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f} GiB"


def num_text(x: float | None, digits: int = 3) -> str:
    return "unknown" if x is None else f"{x:.{digits}f}"


#: Budget keys that, all unknown, mean the log has no startup memory lines to build a budget on.
STARTUP_KEYS = ("pre_gib", "post_gib", "weights_gib", "mem_fraction_static", "kv_logged_gib")


def budget_known(budget: dict[str, Any]) -> bool:
    """Whether the budget holds anything the log said (else the OOM message's table stands in)."""
    if budget.get("engine") == "vllm":
        return any(
            budget.get(k) is not None
            for k in ("gpu_memory_utilization", "weights_gib", "kv_gib", "budget_gib")
        )
    return any(budget.get(k) is not None for k in STARTUP_KEYS)


def known_rows(rows: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """Rows with a value, and the names of those without one (said once, in one line)."""
    shown = [(n, v) for n, v in rows if "unknown" not in v]
    missing = [n for n, v in rows if "unknown" in v]
    return shown, missing


#: The per-stage (SGLang Omni) or per-rank table: (column, budget key).
RANK_COLUMNS = (
    ("GPU", "gpu"),
    ("y", "mem_fraction_static"),
    ("pre", "pre_gib"),
    ("post", "post_gib"),
    ("weights", "weights_gib"),
    ("KV pool", "kv_gib"),
)


def rank_table(budget: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per stage and GPU (Omni) or per rank, when the log has more than one; the
    budget above is the tightest of them."""
    ranks = budget.get("ranks") or []
    if len(ranks) < 2:
        return [], []
    staged = any(r.get("stage") for r in ranks)
    header = ["stage" if staged else "rank", *(name for name, _ in RANK_COLUMNS)]
    rows = []
    for r in ranks:
        row = [str(r.get("stage") or r.get("rank") or "?")]
        for _, key in RANK_COLUMNS:
            if key == "gpu":
                row.append("?" if r.get("gpu") is None else str(r["gpu"]))
            elif key == "mem_fraction_static":
                row.append("?" if r.get(key) is None else f"{r[key]:.3f}")
            else:
                row.append("?" if r.get(key) is None else gib_text(r[key]))
        rows.append(row)
    if budget.get("ranks_more"):
        rows.append([f"+{budget['ranks_more']['count']} more", *("" for _ in RANK_COLUMNS)])
    return header, rows


#: A number as a log prints it (a size, a count, a token total: ``-561981``, ``4.34``).
_NUMBER = re.compile(r"-?\d[\d.,:]*")
#: The envelope a line starts with (``[2025-07-02 07:41:59 DP0 TP0]``): its numbers are the
#: cheapest to lose, the report shows the line number and the rank beside it.
_ENVELOPE = re.compile(r"^\s*(?:\[[^\]]*\]|\(\w+ pid=\d+\))\s*")
ELLIPSIS = "…"


def numbers(text: str) -> list[str]:
    """The numbers of ``text`` outside its envelope, in order."""
    envelope = _ENVELOPE.match(text)
    return _NUMBER.findall(text[envelope.end() :] if envelope else text)


def middle_cut(text: str, room: int, keep: tuple[str, ...] = ()) -> str:
    """``text`` in at most ``room`` characters: the run that is cut out (shown as ``…``) is the
    one that breaks the fewest numbers (those of the line's envelope count for nothing), nearest
    the middle among equals, so a cut line keeps its figures; a string of ``keep`` (a redaction
    mask the count includes) is never cut into or out."""
    if len(text) <= room:
        return text
    envelope = _ENVELOPE.match(text)
    if envelope and not any(k in envelope.group() for k in keep if k):
        text = text[envelope.end() :]  # the time and rank: the row shows the rank, JSON the rest
        envelope = None
        if len(text) <= room:
            return text
    cut_before = text.endswith(ELLIPSIS)  # cut at its end already (build.py): cut there again
    if cut_before:
        text = text[: -len(ELLIPSIS)]
    drop = len(text) - max(room, 1) + 1
    free_until = envelope.end() if envelope else 0
    weighted = [
        (m.start(), m.end(), 0 if m.end() <= free_until else 1) for m in _NUMBER.finditer(text)
    ]
    for word in keep:
        weighted += [(m.start(), m.end(), 10**6) for m in re.finditer(re.escape(word), text)]
    middle = (len(text) - drop) / 2
    best: tuple[int, int, bool, float, int] | None = None
    for start in range(len(text) - drop + 1):
        end = start + drop
        score = sum(w for s, e, w in weighted if s < end and e > start)
        in_envelope = max(0, min(end, free_until) - start)  # cutting the envelope costs least
        at_end = cut_before and end == len(text)
        key = (score, -in_envelope, not at_end, abs(start - middle), start)
        if best is None or key < best:
            best = key
    start = best[4] if best else 0
    return text[:start] + ELLIPSIS + text[start + drop :]
