"""The picture of the card: parts add up, unknown stays unknown, Markdown shows it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from oomdoctor.budget.card import Surroundings, card_at
from oomdoctor.model import SglangBudget
from oomdoctor.report import picture
from oomdoctor.report.render import render
from tests.conftest import FIXTURES

B = SglangBudget(pre_gib=78.0, post_gib=18.0, weights_gib=60.0, mem_fraction_static=0.7)


def _gib(seg: dict, key: str) -> float | None:
    return next(p["gib"] for p in seg["parts"] if p["key"] == key)


def test_parts_add_up_to_the_card() -> None:
    seg = picture.segments(card_at(B, 0.85, Surroundings(79.65, 79.65 - 78.0, None)))
    assert seg is not None
    assert _gib(seg, "kv") == pytest.approx(6.3) and _gib(seg, "dynamic") == pytest.approx(11.7)
    assert sum(p["gib"] for p in seg["parts"]) == pytest.approx(79.65, abs=0.02)


def test_negative_pool_is_a_shortfall_not_a_negative_bar() -> None:
    seg = picture.segments(card_at(B, 0.70, Surroundings(79.65, 1.65, None)))
    assert seg is not None and seg["kv_shortfall_gib"] == pytest.approx(5.4)
    assert _gib(seg, "kv") == 0.0
    assert "KV short by 5.40 GiB" in picture.text_bar(seg)
    assert picture.mermaid(seg, "x") is None  # a pie cannot show a shortfall


def test_unknown_card_is_unknown_not_zero() -> None:
    seg = picture.segments(card_at(B, 0.85, Surroundings(None, None, None)))
    assert seg is not None and _gib(seg, "held") is None
    assert "held before loading (CUDA context, other processes) unknown" in picture.text_bar(seg)
    assert picture.mermaid(seg, "x") is None


def test_no_numbers_no_picture() -> None:
    assert picture.segments(card_at(SglangBudget(), 0.8, Surroundings(80.0, 1.0, None))) is None


def test_svg_is_well_formed() -> None:
    seg = picture.segments(card_at(B, 0.85, Surroundings(79.65, 1.65, None)))
    assert seg is not None
    root = ET.fromstring(picture.svg([("now", seg), ("after", seg)]))
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    assert len(rects) >= 8


def test_markdown_report_shows_the_picture(report_of: Callable[..., dict]) -> None:
    from markdown_it import MarkdownIt

    # y = 0.85 with a runtime OOM: fix 1 is the allocator setting, so there is no card "after"
    # (a later fix's fraction would picture a launch the diff does not show)
    rep = report_of(FIXTURES / "sglang-0.5.2" / "worked-example-y085.log")
    assert rep["actions"][0]["flag"] == "PYTORCH_CUDA_ALLOC_CONF"
    assert rep["picture"]["before"]["y"] == 0.85 and rep["picture"]["after"] is None
    md = render(rep, "markdown")
    fences85 = [t for t in MarkdownIt("commonmark").parse(md) if t.type == "fence"]
    assert [f for f in fences85 if f.content.startswith("y=0.85 [")]
    # y = 0.70 at startup: fix 1 is the fraction, and the card after it is drawn
    rep = report_of(FIXTURES / "sglang-0.5.2" / "worked-example-y070.log")
    assert rep["picture"]["after"]["y"] == rep["actions"][0]["value"]
    md = render(rep, "markdown")
    fences = [t for t in MarkdownIt("commonmark").parse(md) if t.type == "fence"]
    bars = [f for f in fences if "now   y=0.70 [" in f.content]
    assert bars and "after y=0." in bars[0].content
    mermaid = [f for f in fences85 if f.info == "mermaid"]
    assert mermaid and mermaid[0].content.startswith("pie showData")
    for line in mermaid[0].content.splitlines()[2:]:
        label, value = line.rsplit(":", 1)
        assert label.strip().startswith('"') and float(value) > 0


def test_text_report_shows_the_picture(report_of: Callable[..., dict], tmp_path: Path) -> None:
    rep = report_of(FIXTURES / "sglang-0.5.2" / "worked-example-y070.log")
    out = render(rep, "text")
    assert "The card" in out and "KV short by 5.40 GiB" in out
