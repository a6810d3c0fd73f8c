"""When the log cannot decide, the verdict says so (issue 20, item 6): every verdict under 60%
confidence names its runner-up, how likely it is, and the one question or command that would
settle it, in the JSON (`verdict.alternatives`, at most one entry) and on the text and Markdown
reports (one line under the verdict).

An `unknown` verdict is exempt: no rule fired, so there is no leading category to weigh a
runner-up against; its summary says what was recognised and what is missing instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oomdoctor import pipeline
from oomdoctor.model import CATEGORIES
from oomdoctor.report.render import render
from oomdoctor.rules.verdict import UNCERTAIN
from tests.conftest import FIXTURES, REAL_LOGS, SIDECARS, fixture_log, fixture_snapshots, load_toml

REAL = sorted(REAL_LOGS.glob("*.log")) if REAL_LOGS.is_dir() else []
Report = Callable[..., dict[str, Any]]


def _check(rep: dict[str, Any]) -> None:
    v = rep["verdict"]
    alternatives = v["alternatives"]
    assert len(alternatives) <= 1, alternatives
    for alt in alternatives:
        assert alt["category"] in CATEGORIES and alt["category"] != v["category"], alt
        assert 0 < alt["confidence"] < 1 and alt["confidence"] <= v["confidence"], alt
        assert alt["question"].strip(), alt
    if v["category"] != "unknown" and v["confidence"] < UNCERTAIN:
        assert alternatives, f"{v['category']} at {v['confidence']} without an alternative"


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_verdicts_say_what_they_cannot_decide(sidecar: Path, report_of: Report) -> None:
    rep = report_of(fixture_log(sidecar), fixture_snapshots(sidecar))
    _check(rep)
    expect = load_toml(sidecar)
    if "confidence_below" in expect:  # the sidecar says the log cannot decide
        assert rep["verdict"]["confidence"] < expect["confidence_below"], rep["verdict"]
    if "alternative" in expect:
        got = [a["category"] for a in rep["verdict"]["alternatives"]]
        assert got == [expect["alternative"]], rep["verdict"]


@pytest.mark.skipif(not REAL, reason=f"the shared real logs are not here ({REAL_LOGS})")
@pytest.mark.parametrize("log", REAL, ids=lambda p: p.stem)
def test_real_log_verdicts_say_what_they_cannot_decide(log: Path, report_of: Report) -> None:
    _check(report_of(log))


def test_the_alternative_is_one_line_under_the_verdict(tmp_path: Path) -> None:
    """Text and Markdown show it right below the summary, with its share and question."""
    log = FIXTURES / "sglang-0.5.2" / "startup-oom-message-only.log"
    rules = pipeline.load_rules()
    from oomdoctor.report.build import build_report

    rep = build_report(pipeline.run([str(log)], rules))
    assert rep["verdict"]["alternatives"], rep["verdict"]
    alt = rep["verdict"]["alternatives"][0]
    text = render(rep, "text")
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"Or {alt['category']} ("))
    assert at <= 4 and "What to change" not in "\n".join(lines[:at]), text
    assert f"({alt['confidence'] * 100:.0f}%)" in lines[at]
    md = render(rep, "markdown")
    assert f"**Or `{alt['category']}`**" in md, md


def test_a_rule_below_the_bar_names_its_runner_up() -> None:
    """A rule whose own confidence is under 60% carries a doubt for its usual case, so every
    verdict it gives names the alternative and the question."""
    weak = [r.id for r in pipeline.load_rules() if r.confidence < UNCERTAIN and not r.doubts]
    assert not weak, f"rules under {UNCERTAIN} without a [[doubt]]: {weak}"
