"""Reporters: each turns the (redacted) report dict into text. They decide nothing."""

from __future__ import annotations

from typing import Any

FORMATS = ("text", "markdown", "json")


def render(report: dict[str, Any], fmt: str, color: bool = False, width: int = 100) -> str:
    if fmt == "json":
        from oomdoctor.report.json_report import render as render_json

        return render_json(report)
    if fmt == "markdown":
        from oomdoctor.report.markdown import render as render_md

        return render_md(report)
    from oomdoctor.report.text import render as render_text

    return render_text(report, color=color, width=width)
