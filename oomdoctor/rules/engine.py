"""Evaluate rules against features; the engine, not the rule, stamps id, category and evidence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oomdoctor.model import Line
from oomdoctor.rules.features import Feature
from oomdoctor.rules.schema import Condition, Doubt, Evidence, Finding, Rule

MAX_EVIDENCE_LINES = 8


def _same(value: object, operand: object) -> bool:
    """Equality that never takes a bool for a number (Python's True == 1 is not a rule's)."""
    return isinstance(value, bool) == isinstance(operand, bool) and bool(value == operand)


def _holds(cond: Condition, features: Mapping[str, Feature]) -> bool:
    feature = features.get(cond.key)
    value = feature.value if feature is not None else None
    op, operand = cond.op, cond.operand
    if op == "truthy":
        return bool(value)
    if op == "eq":
        return _same(value, operand)
    if op == "ne":
        return not _same(value, operand)
    if op == "in":
        return any(_same(value, item) for item in operand)
    if op == "not_in":
        return not any(_same(value, item) for item in operand)
    if op == "matches":
        if not isinstance(value, str):
            return False
        try:
            return operand.search(value, timeout=0.05) is not None
        except TimeoutError:  # a catastrophic pattern on a hostile value: no match, no hang
            return False
    if value is None or isinstance(value, bool | str) or isinstance(operand, bool | str):
        return False  # unknown numbers satisfy no comparison
    if op == "lt":
        return bool(value < operand)
    if op == "le":
        return bool(value <= operand)
    if op == "gt":
        return bool(value > operand)
    if op == "ge":
        return bool(value >= operand)
    raise ValueError(f"unknown operator {op}")  # rules.py validates; this is a bug


def _all_any_none(rule: Rule | Doubt, features: Mapping[str, Feature]) -> bool:
    if not all(_holds(c, features) for c in rule.all):
        return False
    if rule.any and not any(_holds(c, features) for c in rule.any):
        return False
    return not any(_holds(c, features) for c in rule.none)


def fires(rule: Rule, features: Mapping[str, Feature]) -> bool:
    return _all_any_none(rule, features)


def doubt_of(rule: Rule, features: Mapping[str, Feature]) -> Doubt | None:
    """The first of the rule's doubts whose conditions hold (None: the evidence is as strong as
    the rule's confidence says)."""
    return next((d for d in rule.doubts if _all_any_none(d, features)), None)


def evaluate(rules: Sequence[Rule], features: Mapping[str, Feature]) -> tuple[Finding, ...]:
    """Findings of every rule that fires, highest priority first (ties keep rule order)."""
    findings: list[Finding] = []
    for rule in rules:
        if not fires(rule, features):
            continue
        lines: dict[int, Line] = {}
        for cond in (*rule.all, *rule.any):
            feature = features.get(cond.key)
            if feature is None or not _holds(cond, features):
                continue
            for line in feature.evidence:
                lines.setdefault(line.seq, line)
        evidence = tuple(Evidence(lines[k]) for k in sorted(lines)[:MAX_EVIDENCE_LINES])
        findings.append(Finding(rule, evidence))
    findings.sort(key=lambda f: -f.rule.priority)
    return tuple(findings)
