"""The report's `judgement` object: what the judgement stage decided (when and where the failure
happened, who held the card), each with the line and the reasoning behind it (oomdoctor/judge)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from oomdoctor.judge.holders import OWN_CLAUSE, top

if TYPE_CHECKING:
    from oomdoctor.diagnosis import Diagnosis
    from oomdoctor.judge.records import Decision


def _decision(d: Decision | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "value": d.value,
        "why": d.why,
        "line": d.line.number if d.line is not None else None,
        "strength": round(d.strength, 2),
    }


def judgement_dict(diag: Diagnosis) -> dict[str, Any]:
    """What the judgement stage decided, each with the line and the reasoning behind it: when
    and where the failure happened, and who held the card (oomdoctor/judge)."""
    holders = diag.oom.holders.holders if diag.oom is not None else ()
    shown = top(holders, lambda h: h.gib, always=lambda h: h.role == "self")
    out = {
        "phase": _decision(diag.phase),
        "phase_rival": _decision(diag.phase_rival),
        "site": _decision(diag.site),
        "fit": _decision(diag.oom.fit) if diag.oom is not None else None,
        "holders": [
            {"pid": h.pid, "gib": round(h.gib, 2), "role": h.role, "why": h.why}
            for h in (holders[i] for i in shown.kept)
        ],
    }
    if shown.more:  # the largest are listed, however many the message names
        out["holders_more"] = {"count": shown.more, "gib": round(shown.more_gib, 2)}
    return out


def decided_rows(judgement: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The judgement as (name, sentence) rows for the text and Markdown reports; a judgement the
    log gave no ground for is left out (the JSON keeps it)."""
    if not judgement:
        return []
    rows: list[tuple[str, str]] = []
    for key in ("phase", "site", "fit"):
        d = judgement.get(key)
        if d and d["value"] != "unknown":
            at = f" (line {d['line']})" if d.get("line") else ""
            rows.append((key, f"{d['value']}{at}: {d['why']}"))
    rival = judgement.get("phase_rival")
    if rival:
        rows.append(("but", f"{rival['value']}: {rival['why']}"))
    for h in judgement.get("holders") or ():
        if h["pid"] is None and h["role"] == "self" and h["why"] == OWN_CLAUSE:
            continue  # the message said so itself: nothing was decided
        who = "this process" if h["pid"] is None else f"PID {h['pid']}"
        rows.append(("holder", f"{who} ({h['gib']:.2f} GiB) is {_ROLE[h['role']]}: {h['why']}"))
    more = judgement.get("holders_more")
    if more:
        rows.append(
            ("holder", f"{more['count']} more processes ({more['gib']:.2f} GiB) not listed")
        )
    return rows


_ROLE = MappingProxyType(
    {
        "self": "this server",
        "sibling": "a stage of the same pipeline",
        "peer": "part of this server",
        "foreign": "another process",
    }
)


#: A judgement this firm was read off the log, not inferred: the text report does not repeat it.
READ_OFF = 0.8


def decided_by_line(
    judgement: dict[str, Any] | None, inferred_only: bool = False
) -> dict[int, str]:
    """Line number → the judgements that line decided, in a few words (the text report puts
    them beside its evidence lines; the JSON and Markdown give the whole reasoning).
    ``inferred_only``: leave out what the line says in so many words (strength ≥ READ_OFF)."""
    out: dict[int, str] = {}
    if not judgement:
        return out
    for key in ("phase", "site"):
        d = judgement.get(key)
        if inferred_only and d and d["strength"] >= READ_OFF:
            continue
        if d and d["value"] != "unknown" and d.get("line"):
            label = f"{key} {d['value']}: {d['why']}"
            out[d["line"]] = f"{out[d['line']]}; {label}" if d["line"] in out else label
    return out
