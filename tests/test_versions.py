"""Version markers: each regex is guarded by a literal it always contains, and the guesses hold
on the fixtures of every release."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.incident.versions import _MARKERS, key

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.mark.parametrize(("literal", "source"), [(m[0], m[1]) for m in _MARKERS])
def test_every_marker_literal_is_part_of_its_pattern(literal: str, source: str) -> None:
    unescaped = re.sub(r"\\(.)", r"\1", source)
    assert literal in unescaped


@pytest.mark.parametrize("release", ["0.3.6", "0.4.6", "0.4.10", "0.5.2", "0.5.10", "0.5.23"])
def test_fixtures_are_dated_within_their_release(release: str) -> None:
    logs = sorted((FIXTURES / f"sglang-{release}").glob("*.log"))
    assert logs
    rules = pipeline.load_rules()
    dated = 0
    for log in logs:
        guess = pipeline.read([str(log)], rules).version
        if guess.low is not None:
            assert key(guess.low) <= key(release), log.name
        if guess.high is not None:
            assert key(release) <= key(guess.high), log.name
        dated += guess.low is not None or guess.high is not None
    assert dated >= len(logs) // 2  # most logs carry a marker
