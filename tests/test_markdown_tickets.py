"""Markdown for a ticket reads well as plain text and renders as it reads (issue 21, item 5):
flags, settings and sizes are code spans, there are no needless escapes (``3\\.10 GiB``,
``\\--mem-fraction-static``, ``y\\_min``), and no internal rule priorities. Rendered with
markdown-it (installed with rich), asserted on the HTML."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES

LOGS = [
    FIXTURES / "sglang-0.5.2" / "worked-example-y070.log",
    FIXTURES / "sglang-0.4.6" / "runtime-overlap-thread-oom.log",
    FIXTURES / "sglang-0.5.10" / "deepseek-v2-lite-kv-pressure.log",
    FIXTURES / "vllm-0.10.1" / "startup-free-memory-cotenant.log",
    FIXTURES / "omni-0.1.9" / "stage-budgets-two-gpus.log",  # a row per stage and GPU
    FIXTURES / "sglang-0.5.10" / "startup-kv-current-value-tp4-compose.log",  # a row per rank
]


class _Html(HTMLParser):
    """The text inside <code> elements, and the text outside them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.code: list[str] = []
        self.prose: list[str] = []
        self.tags: list[str] = []
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "code":
            self._depth += 1
            self.code.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._depth:
            self.code[-1] += data
        else:
            self.prose.append(data)


def markdown(log: Path) -> str:
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--no-gpu", "--format", "markdown"])
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def rendered(md: str) -> _Html:
    from markdown_it import MarkdownIt

    html = _Html()
    html.feed(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md))
    return html


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_the_source_has_no_needless_escapes_and_no_priorities(log: Path) -> None:
    md = markdown(log)
    assert not re.search(r"\d\\\.\d", md), "a number with an escaped dot"
    assert "\\--" not in md and "\\-" + "-" not in md, "an escaped flag"
    assert not re.search(r"[A-Za-z0-9]\\_[A-Za-z0-9]", md), "an escaped underscore inside a word"
    assert "priority" not in md
    assert [line for line in md.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_flags_and_sizes_render_as_code(log: Path) -> None:
    md = markdown(log)
    html = rendered(md)
    prose = "".join(html.prose)
    assert "\\" not in prose  # every escape that is left is one the renderer consumes
    flags_in_prose = re.findall(r"(?<![\w-])--[a-z][\w-]+", prose)
    assert flags_in_prose == [], flags_in_prose
    sizes_in_prose = re.findall(r"(?<![\w.])\d+\.\d+ (?:GiB|MiB)\b", prose)
    assert sizes_in_prose == [], sizes_in_prose
    assert any(c.startswith("--") for c in html.code), html.code


def test_the_worked_example_reads_as_its_numbers() -> None:
    md = markdown(LOGS[0])
    html = rendered(md)
    assert "table" in html.tags
    assert "78.00 GiB" in html.code and "-5.40 GiB" in html.code  # the budget's cells
    assert any(re.fullmatch(r"--mem-fraction-static 0\.\d+", c) for c in html.code)
    # the plain-text source says the same without a renderer
    assert "| free before weights (pre) | `78.00 GiB` |" in md
    assert "| `--mem-fraction-static` (y) | 0.700 |" in md
