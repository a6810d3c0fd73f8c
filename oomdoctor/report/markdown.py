"""Markdown for incident tickets (jinja2 template, StrictUndefined)."""

from __future__ import annotations

from typing import Any


def render(report: dict[str, Any]) -> str:
    """The Markdown report. Every log- or process-derived value in the template goes through
    ``esc``, ``code``, ``fence`` or ``fence_lines`` (md_safe); control characters in the whole
    dict are made visible first."""
    import jinja2

    from oomdoctor.report.labels import holder_label, visible_tree
    from oomdoctor.report.md_safe import code, escape, fence, fence_lines, prose

    report = visible_tree(report)
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("oomdoctor.report", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML: every log-derived value goes through a filter
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    from urllib.parse import quote

    from oomdoctor.incident.timeline import sparkline
    from oomdoctor.report import picture

    env.filters["holder"] = holder_label
    env.filters["bars"] = picture.bars
    env.filters["mermaid"] = lambda seg: picture.mermaid(seg, f"the card at y = {seg['y']:.2f}")
    env.filters["sparkline"] = sparkline
    env.filters["urlpath"] = lambda p: quote(str(p))
    env.filters["fence"] = fence
    env.filters["fence_lines"] = fence_lines
    env.filters["code"] = code
    env.filters["esc"] = escape
    env.filters["prose"] = prose
    from oomdoctor.report.firstscreen import (
        CHANGE_LABEL,
        alternatives_label,
        budget_known,
        budget_rows,
        change_lines,
        first_alternative,
        gib_text,
        known_rows,
        num_text,
        oom_rows,
        rank_table,
    )
    from oomdoctor.report.judgement_json import decided_rows

    env.filters["gib"] = gib_text
    env.filters["num"] = num_text
    title, rows = budget_rows(report["budget"])
    alternatives_from = first_alternative(report["actions"])
    shown, missing = known_rows(rows) if budget_known(report["budget"]) else ([], [])
    first = {
        "change": change_lines(report["actions"]),
        "change_label": CHANGE_LABEL,
        "alternatives_from": alternatives_from,
        "alternatives_label": alternatives_label(alternatives_from or 0),
        "budget_title": title[:1].upper() + title[1:],
        "budget_rows": shown,
        "budget_missing": missing,
        "oom": oom_rows(report.get("failure"), report.get("judgement")),
        "ranks": rank_table(report["budget"]),
        "decided": decided_rows(report.get("judgement")),
    }
    return env.get_template("report.md.j2").render(r=report, fs=first)
