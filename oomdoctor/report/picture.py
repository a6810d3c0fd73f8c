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


def text_bar(seg: dict[str, Any], width: int = 64) -> str:
    """``[ooccWWWWWWKKKdd..]`` scaled to the card (or to pre when the card is unknown); at most
    ``width`` cells whatever the numbers say."""
    parts, total = _drawn(seg)
    cells = ""
    for key, _, gib in parts:
        room = width - len(cells)
        cells += _CHAR[key] * min(room, round(_fraction(gib, total) * width))
    bar = f"[{cells.ljust(width)}]"
    legend = "; ".join(
        f"{_CHAR[p['key']]} {p['label']} {'unknown' if p['gib'] is None else format(p['gib'], '.2f') + ' GiB'}"
        for p in seg["parts"]
    )
    short = (
        f"; KV short by {seg['kv_shortfall_gib']:.2f} GiB" if seg.get("kv_shortfall_gib") else ""
    )
    return f"y={seg['y']:.2f} {bar}\n  {legend}{short}"


def bars(pic: dict[str, Any]) -> str:
    """The card now and, when a change is recommended, after it."""
    if not pic.get("after"):
        return text_bar(pic["before"])
    now = text_bar(pic["before"]).replace("\n", "\n      ")
    after = text_bar(pic["after"]).replace("\n", "\n      ")
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


def svg(pictures: list[tuple[str, dict[str, Any]]], width: int = 720) -> str:
    """Stacked horizontal bars, one per (caption, segments), with a legend."""
    from html import escape  # only --svg pays for html.entities

    row, top = 46, 10
    height = top + row * len(pictures) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">'
    ]
    bar_w = width - 20
    for i, (caption, seg) in enumerate(pictures):
        y0 = top + i * row
        out.append(f'<text x="10" y="{y0 + 12}">{escape(caption)}</text>')
        parts, total = _drawn(seg)
        x = 10.0
        for key, label, gib in parts:
            w = min(_fraction(gib, total) * bar_w, 10 + bar_w - x)  # the bar ends at the card
            if w <= 0:
                continue
            out.append(
                f'<rect x="{x:.1f}" y="{y0 + 18}" width="{w:.1f}" height="20" fill="{_COLOUR[key]}">'
                f"<title>{escape(label)}: {gib:.2f} GiB</title></rect>"
            )
            x += w
    lx = 10
    for key, _, _, colour in PARTS:
        label = _SHORT[key]
        out.append(f'<rect x="{lx}" y="{height - 22}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 13}">{escape(label)}</text>')
        lx += 14 + 7 * len(label) + 14
    out.append("</svg>")
    return "\n".join(out) + "\n"
