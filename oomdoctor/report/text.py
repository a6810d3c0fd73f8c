"""Terminal report (rich). Log text is printed as plain Text, never parsed as markup, and only
after ``labels.visible_tree`` made its control characters visible: rich passes ESC through, so
without it a log line or a process name could clear the screen or forge a link."""

from __future__ import annotations

import io
import re
from types import MappingProxyType
from typing import Any

from oomdoctor.report.firstscreen import (
    CHANGE_LABEL,
    OomRows,
    alternatives_label,
    budget_known,
    budget_rows,
    change_lines,
    first_alternative,
    gib_text,
    known_rows,
    middle_cut,
    numbers,
    oom_rows,
    rank_table,
)
from oomdoctor.report.judgement_json import decided_by_line
from oomdoctor.report.labels import holder_label, one_line, visible_tree
from oomdoctor.report.secrets import MASK

#: Spaces at the end of a line, before any colour codes that end it.
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)
#: Terminal rows an evidence line may take before it is cut (in the middle).
EVIDENCE_ROWS = 2

_STYLE = MappingProxyType(
    {
        "startup_kv_alloc": "bold red",
        "runtime_activation": "bold red",
        "cotenant_pressure": "bold magenta",
        "encoder_starvation": "bold red",
        "not_oom": "bold yellow",
        "unknown": "bold",
    }
)


def _picture(console: Any, pic: dict[str, Any] | None, width: int) -> None:
    from rich.text import Text

    from oomdoctor.report.picture import bars

    if not pic:
        return
    console.print(Text("The card", style="bold underline"))
    console.print(Text(bars(pic, width)), soft_wrap=True)
    console.print()


def _timeline(console: Any, t: dict[str, Any] | None) -> None:
    from rich.text import Text

    from oomdoctor.incident.timeline import sparkline

    if not t:
        return
    console.print(Text("Token usage over time", style="bold underline"))
    console.print(Text(f"{t['first_ts']} {sparkline(t['usage'])} {t['last_ts']}"), soft_wrap=True)
    bits = [f"peak {t['peak_usage']:.2f}" if t["peak_usage"] is not None else "peak unknown"]
    bits.append(f"{t['minutes_at_95']:.0f} min at ≥ 0.95")
    if t["retractions"]:
        rate = f" ({t['retractions_per_hour']:.0f}/hour)" if t.get("retractions_per_hour") else ""
        bits.append(f"{t['retractions']} retraction(s){rate}")
    console.print(Text(", ".join(bits)))
    console.print()


def _gpu(console: Any, gpu: dict[str, Any] | None) -> None:
    from rich.text import Text

    if not gpu or not gpu.get("available"):
        return  # the notices say why, once
    console.print(Text("GPU holders", style="bold underline"))
    when = f", taken {gpu['time']}" if gpu.get("time") else ""
    console.print(
        Text(f"snapshot: {gpu['source']}{when}; server GPUs from {gpu['mapping']}", style="dim")
    )
    by_gpu: dict[str | None, list[dict[str, Any]]] = {}
    for p in gpu["processes"]:
        by_gpu.setdefault(p["gpu_uuid"], []).append(p)
    for d in gpu["devices"]:
        if not d["server"] and d["uuid"] not in by_gpu:
            continue
        tags = [t for t, on in (("server GPU", d["server"]), ("failing", d["failing"])) if on]
        head = f"GPU {d['index']} {d['name'] or ''} {d['pci_bus_id'] or ''}".strip()
        size = f"total {gib_text(d['total_gib'])}, used {gib_text(d['used_gib'])}"
        console.print(Text(f"{head} ({', '.join(tags) or 'other'}): {size}", style="bold"))
        for p in by_gpu.pop(d["uuid"], []):
            cost = (
                f", costs the KV pool {gib_text(p['kv_cost_gib'])}" if p.get("kv_cost_gib") else ""
            )
            console.print(
                Text(f"  pid {p['pid']:<8} {gib_text(p['used_gib']):>11}  {holder_label(p)}{cost}")
            )
        if d.get("unattributed_gib"):
            console.print(
                Text(f"  {'':<12} {gib_text(d['unattributed_gib']):>11}  held by no listed process")
            )
    if gpu.get("processes_more"):
        more = gpu["processes_more"]
        console.print(Text(f"  {more['count']} more processes hold {gib_text(more['gib'])}"))
    for uuid, procs in by_gpu.items():  # processes whose GPU is not in the device table
        console.print(Text(f"GPU {uuid or '?'}", style="bold"))
        for p in procs:
            console.print(
                Text(f"  pid {p['pid']:<8} {gib_text(p['used_gib']):>11}  {holder_label(p)}")
            )
    console.print()


def _table(console: Any, title: str, rows: list[tuple[str, str]]) -> None:
    """Two aligned columns; plain text rather than rich.table, which costs start-up time."""
    from rich.text import Text

    left = max(len(title), *(len(name) for name, _ in rows)) if rows else len(title)
    right = max(len("value"), *(len(value) for _, value in rows)) if rows else 5
    console.print(Text(f"{title:<{left}}  {'value':>{right}}", style="bold"))
    for name, value in rows:
        console.print(Text(f"{name:<{left}}  {value:>{right}}"))


def evidence_text(text: str, room: int, width: int) -> str:
    """An evidence line in one row when a cut in its middle keeps every number, else in at most
    EVIDENCE_ROWS rows, cut where the fewest numbers are."""
    one = middle_cut(text, max(room, 40), keep=(MASK,))
    if numbers(one) == numbers(text) and one.count(MASK) == text.count(MASK):
        return one
    wider = max(room + (EVIDENCE_ROWS - 1) * width, width + width // 2)
    cut = middle_cut(text, wider, keep=(MASK,))
    if cut.count(MASK) == text.count(MASK):
        return cut
    # masks everywhere: keep every one the redaction count includes, cut after the last
    end = text.rfind(MASK) + len(MASK)
    return text if len(text) <= end + 1 else text[:end] + "…"


def _oom_table(console: Any, oom: OomRows) -> None:
    """The failed request beside what the card held, as the OOM message gives them."""
    from rich.text import Text

    console.print(Text("What the OOM message says", style="bold underline"))
    lw = max((len(n) + len(v) for n, v in oom.request), default=0) + 2
    rw = max((len(n) + len(v) for n, v in oom.card), default=0) + 2
    for i in range(max(len(oom.request), len(oom.card))):
        left = _pair(oom.request, i, lw)
        right = _pair(oom.card, i, rw)
        console.print(Text(f"{left}    {right}".rstrip()))


def _pair(rows: list[tuple[str, str]], i: int, width: int) -> str:
    if i >= len(rows):
        return " " * width
    name, value = rows[i]
    return f"{name}{value:>{width - len(name)}}"


class _Batch:
    """Collects what the report prints and hands it to rich in a few calls: each print has a
    fixed cost, and a report is some forty lines. Runs with the same wrapping are joined."""

    def __init__(self, console: Any) -> None:
        self._console = console
        self._items: list[tuple[Any, bool]] = []

    def print(self, text: Any = None, soft_wrap: bool = False) -> None:
        from rich.text import Text

        self._items.append((Text("") if text is None else text, soft_wrap))

    def flush(self) -> None:
        from rich.text import Text

        run: list[Any] = []
        mode = False
        for text, soft in [*self._items, (None, None)]:
            if run and soft is not mode:
                self._console.print(Text("\n").join(run), soft_wrap=mode)
                run = []
            if text is not None:
                run.append(text)
                mode = bool(soft)
        self._items.clear()


def render(report: dict[str, Any], color: bool = False, width: int = 100) -> str:
    from rich.console import Console
    from rich.text import Text

    report = visible_tree(report)  # first: every string below comes from here
    buf = io.StringIO()
    rich_console = Console(  # every setting given: rich then never probes the terminal
        file=buf,
        width=width,
        height=50,
        force_terminal=color,
        color_system="standard" if color else None,
        no_color=not color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console = _Batch(rich_console)
    v = report["verdict"]
    head = Text()
    head.append(f"{v['category']}", style=_STYLE.get(v["category"], "bold"))
    head.append(f"  ({v['confidence'] * 100:.0f}% confidence)")
    console.print(head)
    console.print(Text(v["summary"]))
    for alt in v.get("alternatives") or ():
        console.print(
            Text(f"Or {alt['category']} ({alt['confidence'] * 100:.0f}%): ", style="bold")
            + Text(alt["question"])
        )
    console.print()

    console.print(Text("What to change", style="bold underline"))
    if not report["actions"]:
        console.print(Text("Nothing: no out-of-memory was found."))
    change = change_lines(report["actions"])
    if change:
        console.print(Text(CHANGE_LABEL, style="bold"))
    for line in change:
        console.print(Text(f"  {one_line(line)}", style="green" if line[0] == "+" else "red"))
    alternatives_from = first_alternative(report["actions"])
    for i, a in enumerate(report["actions"], 1):
        if i - 1 == alternatives_from:
            console.print(Text(alternatives_label(i - 1), style="bold"))
        console.print(Text(f"{i}. ", style="bold") + Text(one_line(a["text"])))
        if a.get("basis"):
            console.print(Text(f"   basis: {a['basis']}", style="dim"))
    if v.get("why"):
        console.print(Text("Why: ", style="bold") + Text(v["why"].replace("\n", " ")))
    console.print()

    b = report["budget"]
    if budget_known(b):
        title, rows = budget_rows(b)
        shown, missing = known_rows(rows)
        _table(console, title, shown)
        if missing:
            console.print(Text(f"not in the log: {'; '.join(missing)}", style="dim"))
        header, ranks = rank_table(b)
        if ranks:
            console.print()
            widths = [max(len(c[i]) for c in [header, *ranks]) for i in range(len(header))]
            for n, row in enumerate([header, *ranks]):
                cells = [row[0].ljust(widths[0])] + [
                    c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
                ]
                console.print(Text("  ".join(cells), style="bold" if n == 0 else ""))
        console.print()
    elif oom := oom_rows(report.get("failure"), report.get("judgement")):
        _oom_table(console, oom)
        console.print()

    _picture(console, report.get("picture"), width)
    _timeline(console, report.get("timeline"))
    _gpu(console, report.get("gpu"))
    sources = {e["source"] for f in report["findings"] for e in f["evidence"]}
    one = next(iter(sources)) if len(sources) == 1 else None
    console.print(
        Text("Evidence", style="bold underline") + (Text(f" in {one}", style="bold") if one else "")
    )
    if not report["findings"]:
        console.print(Text("No rule fired."))
    decided = decided_by_line(report.get("judgement"), inferred_only=True)
    cited = {e["line"] for f in report["findings"][:1] for e in f["evidence"]}
    for number, label in decided.items():
        if number not in cited:  # what decided a judgement, where no evidence line shows it
            console.print(Text(f"  {number}: ", style="cyan") + Text(one_line(label)))
    for n, f in enumerate(report["findings"]):
        if n:  # the winner's title is the summary above; the others say what they saw
            console.print(Text(f"[{f['rule']}] ", style="bold") + Text(f["title"]))
        for e in f["evidence"]:
            where = one_line(("" if one else f"{e['source']}:") + str(e["line"]))
            where += f" [{e['rank']}]" if e.get("rank") else ""
            if n == 0 and e["line"] in decided:  # the judgement this line decided, first
                where += f" [{one_line(decided[e['line']])}]"
            # two terminal rows at most, cut in the middle where the fewest numbers are (the
            # JSON has the whole line); a mask the redaction count includes stays in view
            text = evidence_text(one_line(e["text"]), width - len(where) - 4, width)
            console.print(Text(f"  {where}: ", style="cyan") + Text(text))
    for n in report["notices"]:
        console.print(Text(f"note: {n}", style="dim"))
    footer = f"{report['input']['lines_read']:,} lines read"
    if report["input"].get("sglang_version"):
        footer += f"; SGLang formats {report['input']['sglang_version']}"
    footer += f"; {report['redactions']} secret(s) redacted"
    console.print(Text(footer, style="dim"))
    console.flush()
    return without_trailing_spaces(buf.getvalue())


def without_trailing_spaces(text: str) -> str:
    """rich pads a wrapped row with the space it broke at: no line ends in spaces (a pipe, a
    ticket, a diff of two reports), also before the colour reset."""
    return _TRAILING.sub(r"\1", text)
