"""The first screen is fix 1 (issue 21, item 2): the diff block holds the changes of the first
action and nothing else, labelled as fix 1; an action without a flag still comes first, as text;
alternatives ("Or ...", "If the other process must stay ...") are listed as alternatives."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES

WORKED = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
NOTEBOOK = FIXTURES / "sglang-0.5.10" / "startup-kv-cotenant-notebook.log"
NOTEBOOK_SNAPSHOT = FIXTURES / "snapshots" / "h100-notebook.xml"
RUNTIME = FIXTURES / "sglang-0.4.6" / "runtime-overlap-thread-oom.log"


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["diagnose", *args])
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def section(text: str) -> list[str]:
    """The lines of the text report's "What to change" section."""
    lines = text.splitlines()
    start = lines.index("What to change") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Why:"))
    return lines[start:end]


def diff_of(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if re.match(r"^  [-+] ", line)]


def test_worked_example_diff_is_exactly_fix_1() -> None:
    data = json.loads(run(str(WORKED), "--no-gpu", "--format", "json"))
    fix1 = data["actions"][0]
    lines = section(run(str(WORKED), "--no-gpu"))
    assert lines[0] == "Fix 1 as a launch-flag diff:"
    assert diff_of(lines) == [
        f"- {fix1['flag']} {fix1['current']:.2f}",
        f"+ {fix1['flag']} {fix1['value']:.2f}",
    ]
    assert lines[len(diff_of(lines)) + 1].startswith(f"1. Set {fix1['flag']} {fix1['value']:.2f}")
    # the picture "after" is the card after fix 1: its KV pool is the one fix 1 promises
    after = {p["key"]: p["gib"] for p in data["picture"]["after"]["parts"]}
    assert data["picture"]["after"]["y"] == fix1["value"]
    assert f"{after['kv']:.2f} GiB" in fix1["text"]


def test_later_fixes_are_not_merged_into_the_diff() -> None:
    """fix 1 is the allocator setting; the fraction and the chunked prefill stay in their own
    numbered actions, never in one merged launch."""
    data = json.loads(run(str(RUNTIME), "--no-gpu", "--format", "json"))
    flags = [a["flag"] for a in data["actions"]]
    assert flags[0] == "PYTORCH_CUDA_ALLOC_CONF" and "--chunked-prefill-size" in flags
    text = run(str(RUNTIME), "--no-gpu")
    assert diff_of(section(text)) == ["+ PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    md = run(str(RUNTIME), "--no-gpu", "--format", "markdown")
    assert "Fix 1 as a launch-flag diff:" in md
    block = md.split("```diff\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == ["+ PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]


def test_fix_without_a_flag_comes_first_and_the_fallback_is_an_alternative() -> None:
    args = (str(NOTEBOOK), "--snapshot", str(NOTEBOOK_SNAPSHOT))
    data = json.loads(run(*args, "--format", "json"))
    assert data["actions"][0]["flag"] is None and "31337" in data["actions"][0]["text"]
    fallback = next(a for a in data["actions"] if a["flag"] == "--mem-fraction-static")
    assert fallback["alternative"] is True
    lines = section(run(*args))
    assert diff_of(lines) == [] and "Fix 1 as a launch-flag diff:" not in lines
    assert lines[0].startswith("1. Process 31337")
    heading = lines.index("Alternatives, instead of fix 1:")
    assert lines[heading + 1].startswith("2. If the other process must stay")
    md = run(*args, "--format", "markdown")
    what = md.split("### What to change", 1)[1].split("**Why:**", 1)[0]
    assert "```diff" not in what
    assert what.index("1. Process 31337") < what.index("Alternatives, instead of fix 1:")


def test_alternatives_follow_the_fixes_they_replace(tmp_path: Path) -> None:
    """Every report: an alternative is never fix 1, and none is listed before a plain fix."""
    for log in (NOTEBOOK, FIXTURES / "sglang-0.1.20" / "legacy-decode-never-happen.log"):
        data = json.loads(run(str(log), "--no-gpu", "--format", "json"))
        kinds = [a["alternative"] for a in data["actions"]]
        assert kinds and not kinds[0] and kinds == sorted(kinds), kinds
