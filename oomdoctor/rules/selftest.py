"""Run each rule against its own fixtures: it must fire on `fire` and stay silent on `silent`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor import pipeline
from oomdoctor.gpu.loaders import load
from oomdoctor.gpu.snapshot import SnapshotError
from oomdoctor.rules import engine
from oomdoctor.rules.schema import FixtureRef, Rule

if TYPE_CHECKING:
    from oomdoctor.knowledge import Knowledge


class RuleCheck(NamedTuple):
    rule: str
    expect: str  # "fire" or "silent"
    fixture: FixtureRef
    ok: bool
    detail: str


def check(
    rule: Rule,
    fixture: FixtureRef,
    expect: str,
    all_rules: Sequence[Rule],
    knowledge: Knowledge | None = None,
) -> RuleCheck:
    missing = [p for p in (fixture.log, *fixture.snapshots) if not p.is_file()]
    if missing:
        return RuleCheck(rule.id, expect, fixture, False, f"no such fixture file {missing[0]}")
    try:
        gpu = load(list(fixture.snapshots)) if fixture.snapshots else None
    except SnapshotError as exc:
        return RuleCheck(rule.id, expect, fixture, False, f"bad snapshot: {exc}")
    incident = pipeline.read([str(fixture.log)], all_rules, knowledge=knowledge)
    feats = pipeline.features_of(incident, gpu)
    fired = engine.fires(rule, feats)
    ok = fired == (expect == "fire")
    detail = ""
    if not ok:
        shown = [c.key for c in (*rule.all, *rule.any, *rule.none)]
        values = ", ".join(f"{k}={feats[k].value!r}" for k in dict.fromkeys(shown) if k in feats)
        detail = f"{'did not fire' if expect == 'fire' else 'fired'}; {values}"
    return RuleCheck(rule.id, expect, fixture, ok, detail)


def check_rules(
    rules: Sequence[Rule], all_rules: Sequence[Rule], knowledge: Knowledge | None = None
) -> Iterator[RuleCheck]:
    for rule in rules:
        for fixture in rule.fire:
            yield check(rule, fixture, "fire", all_rules, knowledge)
        for fixture in rule.silent:
            yield check(rule, fixture, "silent", all_rules, knowledge)
