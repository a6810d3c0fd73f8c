"""Run each rule against its own fixtures: it must fire on `fire` and stay silent on `silent`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from oomdoctor import budget, engine, features, pipeline
from oomdoctor.rules import Rule


@dataclass(frozen=True, slots=True)
class RuleCheck:
    rule: str
    expect: str  # "fire" or "silent"
    fixture: Path
    ok: bool
    detail: str


def check(rule: Rule, fixture: Path, expect: str, all_rules: Sequence[Rule]) -> RuleCheck:
    if not fixture.is_file():
        return RuleCheck(
            rule.id, expect, fixture, False, f"no such fixture file (rule: {rule.path})"
        )
    incident = pipeline.read([str(fixture)], all_rules)
    primary = features.primary_failure(incident)
    feats = features.compute(incident, budget.build(incident, primary), primary)
    fired = engine.fires(rule, feats)
    ok = fired == (expect == "fire")
    detail = ""
    if not ok:
        shown = [c.key for c in (*rule.all, *rule.any, *rule.none)]
        values = ", ".join(f"{k}={feats[k].value!r}" for k in dict.fromkeys(shown) if k in feats)
        detail = f"{'did not fire' if expect == 'fire' else 'fired'}; {values}"
    return RuleCheck(rule.id, expect, fixture, ok, detail)


def check_rules(rules: Sequence[Rule], all_rules: Sequence[Rule]) -> Iterator[RuleCheck]:
    for rule in rules:
        for fixture in rule.fire:
            yield check(rule, fixture, "fire", all_rules)
        for fixture in rule.silent:
            yield check(rule, fixture, "silent", all_rules)
