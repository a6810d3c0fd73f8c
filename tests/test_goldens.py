"""Goldens lock behaviour while code moves: any change in what oomdoctor decides shows as a diff.

- `golden/fixtures/<fixture>.json`: the whole JSON report of every fixture log (with its sidecar's
  snapshots), paths made relative to the repository.
- `golden/real-logs/<id>.json`: for every real log in ../shared/real-logs, the decision only:
  category, rule, confidence, engine, failure kind/site/phase, each action's flag, direction and
  values, and the budget's numbers. No log text is kept: those logs stay outside the repository.

Re-bless after a deliberate change with `pytest --bless` and review `git diff tests/golden`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, REAL_LOGS, REPO, SIDECARS, fixture_log, fixture_snapshots

GOLDEN = Path(__file__).parent / "golden"
FIXTURE_GOLDEN = GOLDEN / "fixtures"
REAL_GOLDEN = GOLDEN / "real-logs"
REAL = sorted(REAL_LOGS.glob("*.log")) if REAL_LOGS.is_dir() else []

Report = Callable[..., dict[str, Any]]


def _golden_of(sidecar: Path) -> Path:
    rel = fixture_log(sidecar).relative_to(FIXTURES)
    return FIXTURE_GOLDEN / rel.with_suffix(".json")


def _relative(report: dict[str, Any]) -> str:
    """The report as stable text: no checkout path, no tool version."""
    stable = {k: v for k, v in report.items() if k != "tool"}
    text = json.dumps(stable, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return text.replace(str(REPO) + "/", "")


def _compare(path: Path, text: str, request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--bless"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    assert path.is_file(), f"no golden {path.relative_to(GOLDEN)}: run pytest --bless, review it"
    assert text == path.read_text("utf-8"), (
        f"{path.relative_to(GOLDEN)} differs: if the change is deliberate, run pytest --bless "
        "and commit the golden with a message that says why"
    )


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_report(sidecar: Path, report_of: Report, request: pytest.FixtureRequest) -> None:
    report = report_of(fixture_log(sidecar), fixture_snapshots(sidecar))
    _compare(_golden_of(sidecar), _relative(report), request)


def _numbers(record: dict[str, Any]) -> dict[str, Any]:
    """A record's numbers and flags, never its text."""
    return {k: v for k, v in record.items() if v is None or isinstance(v, (bool, int, float))}


def decision(report: dict[str, Any]) -> dict[str, Any]:
    verdict, failure, budget = report["verdict"], report["failure"], report["budget"]
    return {
        "category": verdict["category"],
        "rule": verdict["rule"],
        "confidence": verdict["confidence"],
        "engine": report["input"]["engine"],
        "failure": failure and {k: failure[k] for k in ("kind", "phase", "site", "stage")},
        "actions": [
            {k: a[k] for k in ("flag", "direction", "value", "current")} for a in report["actions"]
        ],
        "budget": budget and {**_numbers(budget), "ranks": [_numbers(r) for r in budget["ranks"]]},
    }


@pytest.mark.skipif(not REAL, reason=f"the shared real logs are not here ({REAL_LOGS})")
@pytest.mark.parametrize("log", REAL, ids=lambda p: p.stem)
def test_real_log_decision(log: Path, report_of: Report, request: pytest.FixtureRequest) -> None:
    text = json.dumps(decision(report_of(log)), indent=1, sort_keys=True) + "\n"
    _compare(REAL_GOLDEN / f"{log.stem}.json", text, request)


def test_every_golden_has_its_input() -> None:
    """A golden whose fixture was renamed or removed would otherwise lie there unchecked."""
    wanted = {_golden_of(s) for s in SIDECARS}
    stale = sorted(str(p.relative_to(GOLDEN)) for p in FIXTURE_GOLDEN.rglob("*.json"))
    stale = [p for p in stale if GOLDEN / p not in wanted]
    if REAL:
        names = {p.stem for p in REAL}
        stale += [str(p.relative_to(GOLDEN)) for p in REAL_GOLDEN.glob("*.json")]
        stale = [p for p in stale if not (p.startswith("real-logs/") and Path(p).stem in names)]
    assert not stale, f"goldens without an input (delete them): {stale}"
