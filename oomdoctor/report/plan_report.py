"""The plan as a report dict (the same `budget` object as diagnose) and its text and Markdown.

Both renderings lead with the fix: the verdict in one sentence, the change as a launch-flag diff,
why, the levers when no fraction works, then the numbers.
"""

from __future__ import annotations

import io
from typing import Any

from oomdoctor import __version__
from oomdoctor.budget import card
from oomdoctor.budget.plan import EXIT_STATUS, Plan
from oomdoctor.budget.recommend import fmt_y, window_text
from oomdoctor.report import picture
from oomdoctor.report.budget_json import budget_dict
from oomdoctor.report.build import SCHEMA_VERSION
from oomdoctor.report.firstscreen import gib_text

FLAG = "--mem-fraction-static"


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
            "weights_total_gib": p.weights_gib,
            "tp": p.tp,
            "pp": p.pp,
            "kv_cache_dtype": p.kv_cache_dtype,
            "quantization": p.quantization,
            "sglang_version": p.sglang_version,
            "verdict": plan.verdict,
            "exit_status": EXIT_STATUS[plan.verdict],
            "summary": plan.summary,
            "problems": [{"kind": x.kind, "text": x.text} for x in plan.problems],
            "concurrency_at_context": None
            if plan.concurrency is None
            else round(plan.concurrency, 2),
            "recommended_mem_fraction_static": plan.recommended,
            "why": plan.why,
            "command": plan.command,
            "levers": [
                {
                    "lever": lever.name,
                    "text": lever.text,
                    "command": lever.plan.command,
                    "mem_fraction_static": lever.plan.budget.mem_fraction_static,
                    "kv_gib": _r(lever.plan.budget.kv_gib),
                    "kv_tokens": lever.plan.budget.kv_tokens,
                }
                for lever in plan.levers
            ],
        },
        "budget": budget_dict(b),
        "picture": {"before": before, "after": after, "svg": None} if before else None,
        "notices": list(plan.notes),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _diff(plan: dict[str, Any], b: dict[str, Any]) -> list[str]:
    rec = plan["recommended_mem_fraction_static"]
    if rec is None:
        return []
    return [f"- {FLAG} {fmt_y(b['mem_fraction_static'])}", f"+ {FLAG} {fmt_y(rec)}"]


def _rows(plan: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    tokens = f"{b['kv_tokens']:,}" if b.get("kv_tokens") else "unknown"
    per_request = plan["concurrency_at_context"]
    if b["kv_gib"] is not None and b["kv_gib"] <= 0:
        tokens = "0 (no pool)"
        per_request = 0.0
    rows = [
        ("free before weights (pre)", gib_text(b["pre_gib"])),
        ("weights per GPU", gib_text(b["weights_gib"])),
        (f"{FLAG} (y)", f"{b['mem_fraction_static']:.3f}"),
        ("static share y·pre", gib_text(b["static_gib"])),
        ("dynamic share (1−y)·pre", gib_text(b["dynamic_gib"])),
        ("KV pool y·pre − weights", gib_text(b["kv_gib"])),
    ]
    if b.get("bytes_per_token"):
        rows += [
            ("KV bytes per token", f"{b['bytes_per_token']:,}"),
            ("KV tokens", tokens),
            ("context length", f"{b['context_len']:,}" if b.get("context_len") else "unknown"),
            ("full-context requests", "unknown" if per_request is None else f"{per_request:.2f}"),
        ]
    rows += [
        ("SGLang's runtime reserve", f"{gib_text(b['reserve_gib'])} of the card"),
        (
            "workable y (window)",
            window_text(b["y_min"], b["y_max"], b["mem_fraction_static"]),
        ),
    ]
    return rows


def render_text(rep: dict[str, Any], color: bool = False, width: int = 100) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from oomdoctor.report.labels import one_line, visible_tree

    rep = visible_tree(rep)  # a --model path can hold ESC and newlines like any log line
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    plan, b = rep["plan"], rep["budget"]
    style = {"fine": "bold green", "thin_headroom": "bold yellow"}.get(plan["verdict"], "bold red")
    console.print(Text(plan["verdict"].replace("_", " "), style=style))
    console.print(Text(plan["summary"]))
    console.print()
    diff = _diff(plan, b)
    if diff:
        console.print(Text("What to change", style="bold"))
        for line in diff:
            console.print(Text("  " + line, style="red" if line[0] == "-" else "green"))
    if plan["why"]:
        console.print(Text("Why: " + plan["why"]))
    if plan["command"]:
        console.print(Text("Launch:", style="bold"))
        console.print(Text("  " + one_line(plan["command"])), soft_wrap=True)
    if plan["levers"]:
        console.print(Text("What works instead", style="bold"))
        for i, lever in enumerate(plan["levers"], 1):
            console.print(Text(f"{i}. {lever['text']}"))
            console.print(Text("   " + one_line(lever["command"])), soft_wrap=True)
    elif not plan["command"]:
        console.print(
            Text("Nothing tried here makes it fit: a larger card or more GPUs (--pp-size).")
        )
    console.print()
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    what = " on ".join(x for x in (plan["model"], plan["card"]) if x) or "plan"
    table.add_column(Text(one_line(f"{what}, TP {plan['tp']}")))
    table.add_column("value", justify="right")
    for name, value in _rows(plan, b):
        table.add_row(Text(name), Text(value))
    console.print(table)
    console.print()
    if rep.get("picture"):
        console.print(Text("The card", style="bold underline"))
        console.print(Text(picture.bars(rep["picture"], width)), soft_wrap=True)
        console.print()
    for note in rep["notices"]:
        console.print(Text(f"- {note}", style="dim"))
    from oomdoctor.report.text import without_trailing_spaces

    return without_trailing_spaces(buf.getvalue())


def render_markdown(rep: dict[str, Any]) -> str:
    from oomdoctor.report.labels import visible_tree
    from oomdoctor.report.md_safe import escape, fence, fence_lines

    rep = visible_tree(rep)
    plan, b = rep["plan"], rep["budget"]
    lines = [
        f"## oomdoctor plan: {escape(plan['verdict'].replace('_', ' '))}",
        "",
        escape(plan["summary"]),
        "",
    ]
    diff = _diff(plan, b)
    if diff:
        lines += ["### What to change", "", fence_lines(diff, "diff"), ""]
    if plan["why"]:
        lines += [f"**Why:** {escape(plan['why'])}", ""]
    if plan["command"]:
        lines += ["### Launch", "", fence_lines([plan["command"]], "sh"), ""]
    if plan["levers"]:
        lines += ["### What works instead", ""]
        for i, lever in enumerate(plan["levers"], 1):
            lines += [
                f"{i}. {escape(lever['text'])}",
                "",
                fence_lines([lever["command"]], "sh"),
                "",
            ]
    lines += [
        "| quantity | value |",
        "| --- | --- |",
        f"| card | {escape(plan['card'] or 'unknown')} |",
        f"| model | {escape(plan['model'] or 'unknown')} |",
        f"| tensor parallelism | {escape(plan['tp'])} |",
        *(f"| {escape(name)} | {escape(value)} |" for name, value in _rows(plan, b)),
        "",
    ]
    if rep.get("picture"):
        lines += ["### The card", "", fence(picture.bars(rep["picture"])), ""]
        pie = rep["picture"]["after"] or rep["picture"]["before"]
        chart = picture.mermaid(pie, f"the card at y = {pie['y']:.2f}")
        if chart:
            lines += [fence(chart, "mermaid"), ""]
    lines += [f"- {escape(n)}" for n in rep["notices"]]
    return "\n".join(lines) + "\n"
