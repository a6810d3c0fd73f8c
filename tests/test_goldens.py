"""Goldens lock behaviour while code moves: any change in what oomdoctor decides shows as a diff.

`golden/fixtures/<fixture>.json`: the whole JSON report of every fixture log (with its sidecar's
snapshots), paths made relative to the repository. What a fixture must decide is written by hand
in its sidecar (tests/test_fixture_expectations.py); the golden locks the rest. The real logs of
../shared/real-logs have no goldens: they are judged against their labels
(tests/test_real_logs.py), never against the tool's earlier output.

Re-bless after a deliberate change with `pytest --bless` and review `git diff tests/golden`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, REPO, SIDECARS, fixture_log, fixture_snapshots

GOLDEN = Path(__file__).parent / "golden"
FIXTURE_GOLDEN = GOLDEN / "fixtures"

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


def test_every_golden_has_its_input() -> None:
    """A golden whose fixture was renamed or removed would otherwise lie there unchecked, and
    nothing under golden/ may pin a real log's verdict."""
    wanted = {_golden_of(s) for s in SIDECARS}
    stale = sorted(str(p.relative_to(GOLDEN)) for p in FIXTURE_GOLDEN.rglob("*.json"))
    stale = [p for p in stale if GOLDEN / p not in wanted]
    assert not stale, f"goldens without an input (delete them): {stale}"
    assert not (GOLDEN / "real-logs").exists(), "real logs are judged against their labels"
