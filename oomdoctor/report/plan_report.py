"""The plan as a report dict (the same `budget` object as diagnose) and its text and Markdown."""

from __future__ import annotations

import io
from typing import Any

from oomdoctor import __version__
from oomdoctor.budget import card
from oomdoctor.budget.plan import Plan
from oomdoctor.report import picture
from oomdoctor.report.budget_json import budget_dict
from oomdoctor.report.build import SCHEMA_VERSION


def build(plan: Plan) -> dict[str, Any]:
    p, b = plan.inputs, plan.budget
    model = p.model
    around = card.surroundings(b)
    before = picture.segments(card.card_at(b, b.mem_fraction_static, around))
    after = (
        picture.segments(card.card_at(b, plan.recommended, around))
        if plan.recommended is not None
        else None
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "oomdoctor", "version": __version__},
        "plan": {
            "card": p.card_name,
            "card_mib": p.card_mib,
            "model": p.model_path or (model.name if model else None),
            "model_type": model.model_type if model else None,
            "params_billion": round(model.params / 1e9, 2) if model else None,
            "weights_from": model.weights_from if model and p.weights_gib is None else "given",
            "tp": p.tp,
            "pp": p.pp,
            "kv_cache_dtype": p.kv_cache_dtype,
            "sglang_version": p.sglang_version,
            "verdict": plan.verdict,
            "summary": plan.summary,
            "concurrency_at_context": None
            if plan.concurrency is None
            else round(plan.concurrency, 2),
            "recommended_mem_fraction_static": plan.recommended,
            "command": plan.command,
        },
        "budget": budget_dict(b),
        "picture": {"before": before, "after": after, "svg": None} if before else None,
        "notices": list(plan.notes),
    }


def _gib(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f} GiB"


def render_text(rep: dict[str, Any], color: bool = False, width: int = 100) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        color_system="standard" if color else None,
        no_color=not color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    plan, b = rep["plan"], rep["budget"]
    style = {"fine": "bold green", "will_not_start": "bold red"}.get(plan["verdict"], "bold yellow")
    console.print(Text(plan["verdict"].replace("_", " "), style=style))
    console.print(Text(plan["summary"]))
    console.print()
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    what = " on ".join(x for x in (plan["model"], plan["card"]) if x) or "plan"
    table.add_column(f"{what}, TP {plan['tp']}")
    table.add_column("value", justify="right")
    tokens = f"{b['kv_tokens']:,}" if b.get("kv_tokens") else "unknown"
    rows = [
        ("free before weights (pre)", _gib(b["pre_gib"])),
        ("weights per GPU", _gib(b["weights_gib"])),
        ("--mem-fraction-static (y)", f"{b['mem_fraction_static']:.3f}"),
        ("static share y·pre", _gib(b["static_gib"])),
        ("dynamic share (1−y)·pre", _gib(b["dynamic_gib"])),
        ("KV pool", _gib(b["kv_gib"])),
        ("bytes per token", f"{b['bytes_per_token']:,}" if b.get("bytes_per_token") else "unknown"),
        ("KV tokens", tokens),
        ("context length", str(b["context_len"] or "unknown")),
        (
            "requests at full context",
            "unknown"
            if plan["concurrency_at_context"] is None
            else f"{plan['concurrency_at_context']:.2f}",
        ),
        ("runtime reserve", _gib(b["reserve_gib"])),
        (
            "window y_min – y_max",
            f"{b['y_min']:.3f} – {b['y_max']:.3f}" + (" (empty)" if b.get("window_empty") else ""),
        ),
    ]
    for name, value in rows:
        table.add_row(Text(name), Text(value))
    console.print(table)
    console.print()
    if rep.get("picture"):
        console.print(Text("The card", style="bold underline"))
        console.print(Text(picture.bars(rep["picture"])), soft_wrap=True)
        console.print()
    if plan["recommended_mem_fraction_static"] is not None:
        console.print(
            Text(
                f"Recommended --mem-fraction-static {plan['recommended_mem_fraction_static']:.2f} "
                f"(inside the window, with room on both sides)."
            )
        )
    console.print(Text("Launch:", style="bold"))
    console.print(Text("  " + plan["command"]), soft_wrap=True)
    for note in rep["notices"]:
        console.print(Text(f"- {note}", style="dim"))
    return buf.getvalue()


def render_markdown(rep: dict[str, Any]) -> str:
    from oomdoctor.report.md_safe import escape, fence

    plan, b = rep["plan"], rep["budget"]
    lines = [
        f"## oomdoctor plan: {escape(plan['verdict'].replace('_', ' '))}",
        "",
        escape(plan["summary"]),
        "",
        "| quantity | value |",
        "| --- | --- |",
        f"| card | {escape(plan['card'] or 'unknown')} |",
        f"| model | {escape(plan['model'] or 'unknown')} |",
        f"| tensor parallelism | {plan['tp']} |",
        f"| free before weights (pre) | {_gib(b['pre_gib'])} |",
        f"| weights per GPU | {_gib(b['weights_gib'])} |",
        f"| --mem-fraction-static | {b['mem_fraction_static']:.3f} |",
        f"| KV pool | {_gib(b['kv_gib'])} |",
        f"| KV tokens | {b['kv_tokens'] if b.get('kv_tokens') else 'unknown'} |",
        f"| window y_min – y_max | {b['y_min']:.3f} – {b['y_max']:.3f}{' (empty)' if b.get('window_empty') else ''} |",
        "",
    ]
    if rep.get("picture"):
        lines += ["### The card", "", fence(picture.bars(rep["picture"])), ""]
        pie = rep["picture"]["after"] or rep["picture"]["before"]
        chart = picture.mermaid(pie, f"the card at y = {pie['y']:.2f}")
        if chart:
            lines += ["```mermaid", chart, "```", ""]
    lines += ["### Launch", "", fence(plan["command"], "sh"), ""]
    lines += [f"- {escape(n)}" for n in rep["notices"]]
    return "\n".join(lines) + "\n"
