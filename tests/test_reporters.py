"""Reporters only format: hand-built report dicts in, golden text out.

Re-bless after a deliberate change with `pytest tests/test_reporters.py --bless` and review the diff.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from oomdoctor.report.md_safe import code, fence
from oomdoctor.report.render import render

GOLDEN = Path(__file__).parent / "golden"


def _load(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text("utf-8"))


@pytest.mark.parametrize("name", ["startup", "cotenant"])
@pytest.mark.parametrize(
    ("fmt", "suffix"), [("text", "txt"), ("markdown", "md"), ("json", "json.out")]
)
def test_golden(name: str, fmt: str, suffix: str, request: pytest.FixtureRequest) -> None:
    report = _load(f"{name}.json")
    out = render(report, fmt, color=False, width=100)
    golden = GOLDEN / f"{name}.{suffix}"
    if request.config.getoption("--bless"):
        golden.write_text(out, "utf-8")
    assert golden.is_file(), f"no golden file {golden.name}: run pytest --bless and review it"
    assert out == golden.read_text("utf-8")


def test_json_is_the_report_itself() -> None:
    report = _load("startup.json")
    assert json.loads(render(report, "json")) == report


HOSTILE = (
    "</details><script>alert(1)</script> [click](http://evil.example) ![x](http://e.example/i.png) "
    "<img src=x onerror=alert(1)> ```` ~~~ # heading * list | pipe | & &amp;"
)


def _hostile_report() -> dict:
    report = copy.deepcopy(_load("startup.json"))
    report["verdict"]["summary"] = HOSTILE
    report["actions"][0]["text"] = HOSTILE
    report["notices"] = [HOSTILE]
    report["findings"][0]["evidence"][0]["text"] = HOSTILE
    report["findings"][0]["title"] = HOSTILE
    report["input"]["sources"] = [HOSTILE]
    report["failure"]["site"] = HOSTILE
    report["budget"]["rank"] = HOSTILE
    return report


def test_markdown_log_text_cannot_escape() -> None:
    from markdown_it import MarkdownIt

    md = render(_hostile_report(), "markdown")
    tokens = MarkdownIt("commonmark").parse(md)

    def walk(ts):  # type: ignore[no-untyped-def]
        for t in ts:
            yield t
            if t.children:
                yield from walk(t.children)

    kinds = {t.type for t in walk(tokens)}
    assert "html_block" not in kinds and "html_inline" not in kinds
    assert "link_open" not in kinds
    images = [t for t in walk(tokens) if t.type == "image"]
    assert all(t.attrs.get("src") == "card.svg" for t in images)  # only our own picture
    headings = [t for t in walk(tokens) if t.type == "heading_open"]
    assert all(t.tag in ("h2", "h3") for t in headings)
    fences = [t for t in walk(tokens) if t.type == "fence"]
    assert any(HOSTILE in f.content for f in fences)  # evidence stays inside its fence


def test_text_report_does_not_interpret_markup() -> None:
    report = _hostile_report()
    report["verdict"]["summary"] = "[bold red]not markup[/bold red] [link=http://x]y[/link]"
    out = render(report, "text", color=False)
    assert "[bold red]not markup[/bold red]" in out


@pytest.mark.parametrize("text", ["plain", "a ` b", "```", "x ```` y", "`start", "end`"])
def test_fence_and_code_survive_backticks(text: str) -> None:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(fence(text))
    assert tokens[0].type == "fence" and tokens[0].content == text + "\n"
    inline = MarkdownIt("commonmark").parseInline(code(text))[0].children
    assert (
        inline is not None
        and inline[0].type == "code_inline"
        and inline[0].content.strip() == text.strip()
    )


@pytest.mark.parametrize(
    "text", ["1. item", "# heading", "- item", "> quote", "+ x", "=== x", "a <b> & [l](u)"]
)
def test_escape_keeps_plain_text_plain(text: str) -> None:
    from markdown_it import MarkdownIt

    from oomdoctor.report.md_safe import escape

    tokens = MarkdownIt("commonmark").parse(escape(text))
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]
    assert tokens[1].content.replace("\\", "") == text.replace("\\", "")


def test_markdown_diff_keeps_a_value_on_its_line() -> None:
    """An action value from server_args cannot close the diff fence or add a diff line."""
    from markdown_it import MarkdownIt

    report = copy.deepcopy(_load("startup.json"))
    flagged = next(a for a in report["actions"] if a.get("flag", "").startswith("--"))
    flagged["current"] = "0.70\n```\n<img src=x onerror=alert(1)>\n+ --evil 1"
    tokens = MarkdownIt("commonmark").parse(render(report, "markdown"))
    (diff,) = [t for t in tokens if t.type == "fence" and t.info == "diff"]
    assert f"- {flagged['flag']} 0.70␊```␊<img src=x onerror=alert(1)>␊+ --evil 1" in (
        diff.content.splitlines()
    )
    assert not any(line.startswith("+ --evil") for line in diff.content.splitlines())
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]


def test_text_report_shows_control_characters() -> None:
    report = copy.deepcopy(_load("startup.json"))
    report["verdict"]["summary"] = "\x1b[2J\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\\r\u202e"
    out = render(report, "text", color=False)
    assert "␛[2J␛]8;;http://evil␛\\x␛]8;;␛\\␍\\u202e" in out and "\x1b" not in out


def test_json_writes_c1_and_bidi_controls_as_escapes() -> None:
    report = copy.deepcopy(_load("startup.json"))
    report["verdict"]["summary"] = "csi \x9b2J and \u202eevil\u2066 ok"
    out = render(report, "json")
    assert "\x9b" not in out and "\u202e" not in out and "\u2066" not in out
    assert "\\u009b" in out and "\\u202e" in out
    assert json.loads(out) == report
