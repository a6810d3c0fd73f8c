"""The card as a stacked bar: other processes | context | weights | KV | dynamic share | free.

``segments`` labels the card budget/card.py computed (it goes into the report dict);
``text_bar``, ``svg`` and ``mermaid`` draw it. A part the log does not give is left out of the bar and named as unknown
in the legend, never drawn as zero.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

from oomdoctor.budget.card import Card

#: (key, label, text-bar character, SVG colour)
PARTS: tuple[tuple[str, str, str, str], ...] = (
    ("held", "held before loading (CUDA context, other processes)", "c", "#bdbdbd"),
    ("other", "other processes", "o", "#9e9e9e"),
    ("weights", "weights", "W", "#1f77b4"),
    ("kv", "KV cache", "K", "#2ca02c"),
    ("dynamic", "dynamic share (activations, graphs)", "d", "#ff7f0e"),
    ("left", "left after the weights (no KV pool)", "d", "#ff7f0e"),
    ("free", "free", ".", "#eeeeee"),
)
_SHORT = MappingProxyType(
    {
        "held": "context, others",
        "other": "other processes",
        "weights": "weights",
        "kv": "KV cache",
        "dynamic": "dynamic share",
        "left": "left after weights",
        "free": "free",
    }
)
_CHAR = MappingProxyType({k: c for k, _, c, _ in PARTS})
_LABEL = MappingProxyType({k: label for k, label, _, _ in PARTS})
_COLOUR = MappingProxyType({k: colour for k, _, _, colour in PARTS})


def segments(card: Card | None) -> dict[str, Any] | None:
    """The card as data for the report: its parts in drawing order, with their labels."""
    if card is None:
        return None
    parts = dict(card.parts)
    order = [k for k, *_ in PARTS]
    labels = dict(_LABEL)
    if "other" in parts:
        labels["held"] = "CUDA context"  # the other processes have their own part
    return {
        "y": round(card.y, 4),
        "capacity_gib": None if card.capacity_gib is None else round(card.capacity_gib, 2),
        "parts": [
            {
                "key": k,
                "label": labels[k],
                "gib": None if parts[k] is None else round(parts[k] or 0.0, 2),
            }
            for k in sorted(parts, key=order.index)
        ],
        "kv_shortfall_gib": None
        if card.kv_shortfall_gib is None
        else round(card.kv_shortfall_gib, 2),
    }


def _drawn(seg: dict[str, Any]) -> tuple[list[tuple[str, str, float]], float]:
    """The parts a bar can draw (a finite size above 0) and the size the bar stands for: the
    card, or their sum when the card is unknown (or is not a finite size above 0)."""
    parts = [
        (p["key"], p["label"], float(p["gib"]))
        for p in seg["parts"]
        if isinstance(p["gib"], (int, float)) and math.isfinite(p["gib"]) and p["gib"] > 0
    ]
    card = seg.get("capacity_gib")
    if isinstance(card, (int, float)) and math.isfinite(card) and card > 0:
        return parts, float(card)
    total = math.fsum(g for *_, g in parts)
    return parts, total if math.isfinite(total) and total > 0 else 1.0


def _fraction(gib: float, total: float) -> float:
    """``gib / total`` within 0 – 1: a logged 10⁹ GB on an 80 GB card draws the whole bar."""
    share = gib / total
    return min(share, 1.0) if math.isfinite(share) else 1.0


def legend(seg: dict[str, Any], chars: bool = True) -> list[str]:
    """What the bar of ``seg`` draws, each with its size, then what it does not: the parts the
    log leaves unknown and those of size 0 (named, never drawn), and a KV shortfall."""
    drawn = {key for key, _, _ in _drawn(seg)[0]}
    items = [
        (f"{_CHAR[p['key']]} " if chars else "") + f"{p['label']} {p['gib']:.2f} GiB"
        for p in seg["parts"]
        if p["key"] in drawn
    ]
    if seg.get("kv_shortfall_gib"):
        items.append(f"KV short by {seg['kv_shortfall_gib']:.2f} GiB")
    hidden = [
        f"{p['label']} " + ("unknown" if p["gib"] is None else f"{p['gib']:.2f} GiB")
        for p in seg["parts"]
        if p["key"] not in drawn
    ]
    if hidden:
        items.append(f"not drawn: {', '.join(hidden)}")
    return items


def text_bar(seg: dict[str, Any], width: int = 64, line: int = 100, indent: int = 2) -> str:
    """``[ooccWWWWWWKKKdd..]`` scaled to the card (or to pre when the card is unknown); at most
    ``width`` cells whatever the numbers say; its legend below, wrapped at ``line`` columns."""
    import textwrap

    parts, total = _drawn(seg)
    cells = ""
    for key, _, gib in parts:
        room = width - len(cells)
        cells += _CHAR[key] * min(room, round(_fraction(gib, total) * width))
    bar = f"[{cells.ljust(width)}]"
    text = "; ".join(legend(seg))
    pad = " " * indent
    wrapped = textwrap.wrap(text, max(line - indent, 20), break_on_hyphens=False)
    return f"y={seg['y']:.2f} {bar}\n" + "\n".join(pad + w for w in wrapped)


def bars(pic: dict[str, Any], line: int = 100) -> str:
    """The card now and, when a change is recommended, after it, fitted to ``line`` columns."""
    width = max(20, min(64, line - 16))
    if not pic.get("after"):
        return text_bar(pic["before"], width, line)
    now = text_bar(pic["before"], width, line, indent=8)
    after = text_bar(pic["after"], width, line, indent=8)
    return f"now   {now}\nafter {after}"


def mermaid(seg: dict[str, Any], title: str) -> str | None:
    """A Mermaid pie of the card (GitHub and GitLab render it); None when a part is unknown or is
    no size a pie can show (negative, infinite, not a number). Its words are ours, not the log's."""
    sizes = [p["gib"] for p in seg["parts"]]
    if seg.get("kv_shortfall_gib") or not all(
        isinstance(g, (int, float)) and math.isfinite(g) and g >= 0 for g in sizes
    ):
        return None
    lines = ["pie showData", f"    title {title}"]
    lines += [f'    "{_pie_label(p["label"])}" : {p["gib"]:.2f}' for p in seg["parts"] if p["gib"]]
    return "\n".join(lines)


def _pie_label(label: str) -> str:
    """A label inside Mermaid's double quotes, on one line (labels are ours: this only keeps
    the chart well-formed)."""
    return " ".join(str(label).replace('"', "'").split())


#: Approximate width of one character of the SVG's 12 px sans-serif text, to lay labels out.
_CHAR_PX = 7.0


def svg(pictures: list[tuple[str, dict[str, Any]]], width: int = 720) -> str:
    """Stacked horizontal bars, one per (caption, segments): each part's size is written on it
    when it fits, and every size is listed under its bar (a viewer without tooltips sees them
    all); the legend names only the parts drawn, wrapped to the picture's width."""
    from html import escape  # only --svg pays for html.entities

    bar_w = width - 20
    out: list[str] = []
    y = 10
    drawn_keys: list[str] = []
    for caption, seg in pictures:
        out.append(f'<text x="10" y="{y + 12}" font-weight="bold">{escape(caption)}</text>')
        parts, total = _drawn(seg)
        x = 10.0
        for key, label, gib in parts:
            w = min(_fraction(gib, total) * bar_w, 10 + bar_w - x)  # the bar ends at the card
            if w <= 0:
                continue
            if key not in drawn_keys:
                drawn_keys.append(key)
            out.append(
                f'<rect x="{x:.1f}" y="{y + 18}" width="{w:.1f}" height="22" fill="{_COLOUR[key]}">'
                f"<title>{escape(label)}: {gib:.2f} GiB</title></rect>"
            )
            number = f"{gib:.2f}"
            if w >= _CHAR_PX * len(number) + 6:
                out.append(
                    f'<text x="{x + w / 2:.1f}" y="{y + 33}" text-anchor="middle">{number}</text>'
                )
            x += w
        y += 44
        for row in _wrap(legend(seg, chars=False), bar_w):
            out.append(f'<text x="10" y="{y + 12}" font-size="11">{escape(row)}</text>')
            y += 15
        y += 8
    lx, ly = 10.0, y + 4
    for key in sorted(drawn_keys, key=[k for k, *_ in PARTS].index):
        label = _SHORT[key]
        step = 14 + _CHAR_PX * len(label) + 14
        if lx > 10 and lx + step > width - 10:  # the legend wraps instead of leaving the picture
            lx, ly = 10.0, ly + 18
        out.append(f'<rect x="{lx:.0f}" y="{ly}" width="10" height="10" fill="{_COLOUR[key]}"/>')
        out.append(f'<text x="{lx + 14:.0f}" y="{ly + 9}">{escape(label)}</text>')
        lx += step
    height = ly + 20
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
        f'viewBox="0 0 {width} {height:.0f}" font-family="sans-serif" font-size="12">'
    )
    return "\n".join([head, *out, "</svg>"]) + "\n"


def _wrap(items: list[str], px: float) -> list[str]:
    """``items`` joined by " · " into rows of at most ``px`` pixels (an item never split)."""
    rows: list[str] = []
    for item in items:
        if rows and (len(rows[-1]) + 3 + len(item)) * _CHAR_PX * 11 / 12 <= px:
            rows[-1] += " · " + item
        else:
            rows.append(item)
    return rows
