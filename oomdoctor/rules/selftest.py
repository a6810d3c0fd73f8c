"""Run each rule against its own fixtures: it must fire on `fire` and stay silent on `silent`.

The features of a fixture come from the caller (pipeline.fixture_features), so this module sits
below the pipeline it tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from oomdoctor.gpu.loaders import load
from oomdoctor.gpu.snapshot import SnapshotError
from oomdoctor.rules import engine
from oomdoctor.rules.features import Feature
from oomdoctor.rules.schema import FixtureRef, Rule

#: A fixture log and its GPU state (a snapshot or None) → the features rules see.
FeaturesOf = Callable[[Path, Any], Mapping[str, Feature]]


class RuleCheck(NamedTuple):
    rule: str
    expect: str  # "fire" or "silent"
    fixture: FixtureRef
    ok: bool
    detail: str


def outside(rule: Rule, path: Path) -> bool:
    """Whether a fixture of a user's rule lies outside the rule file's directory (symlinks
    followed). Such a fixture is never opened: a rule that fires or not on it would tell its
    author one bit of any file (``../../etc/passwd``, ``/proc/self/environ``)."""
    root = os.path.realpath(rule.path.parent)
    return os.path.commonpath([root, os.path.realpath(path)]) != root


def check(rule: Rule, fixture: FixtureRef, expect: str, features_of: FeaturesOf) -> RuleCheck:
    paths = (fixture.log, *fixture.snapshots)
    away = [p for p in paths if outside(rule, p)] if rule.user else []
    if away:
        return RuleCheck(
            rule.id,
            expect,
            fixture,
            False,
            f"fixture {away[0]} lies outside the rule's directory; refused (a --rules rule's "
            "fixtures must be files inside its directory)",
        )
    missing = [p for p in paths if not p.is_file()]
    if missing:
        what = "not a regular file" if missing[0].exists() else "no such fixture file"
        return RuleCheck(rule.id, expect, fixture, False, f"{what} {missing[0]}")
    try:
        gpu = load(list(fixture.snapshots)) if fixture.snapshots else None
    except SnapshotError as exc:
        return RuleCheck(rule.id, expect, fixture, False, f"bad snapshot: {exc}")
    feats = features_of(fixture.log, gpu)
    fired = engine.fires(rule, feats)
    ok = fired == (expect == "fire")
    detail = ""
    if not ok:
        shown = [c.key for c in (*rule.all, *rule.any, *rule.none)]
        values = ", ".join(f"{k}={feats[k].value!r}" for k in dict.fromkeys(shown) if k in feats)
        detail = f"{'did not fire' if expect == 'fire' else 'fired'}; {values}"
    elif fired and fixture.evidence:
        (finding,) = engine.evaluate([rule], feats)
        got = sorted({e.line.number for e in finding.evidence})
        absent = [n for n in fixture.evidence if n not in got]
        if absent:
            ok = False
            detail = f"fired, but line(s) {absent} are not among its evidence {got}"
    return RuleCheck(rule.id, expect, fixture, ok, detail)


def check_rules(rules: Sequence[Rule], features_of: FeaturesOf) -> Iterator[RuleCheck]:
    for rule in rules:
        for fixture in rule.fire:
            yield check(rule, fixture, "fire", features_of)
        for fixture in rule.silent:
            yield check(rule, fixture, "silent", features_of)
