"""The rule engine (all/any/none, operators, evidence, order) and the verdict's confidence.

Rules are built in the test (or loaded from a TOML file written to tmp_path); features are
hand-made, so each case says exactly which values a condition sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import regex

from oomdoctor import pipeline
from oomdoctor.model import Line, SglangBudget
from oomdoctor.rules import engine, verdict
from oomdoctor.rules.engine import MAX_EVIDENCE_LINES, evaluate, fires
from oomdoctor.rules.features import Feature
from oomdoctor.rules.schema import Condition, Finding, Rule


def _line(seq: int) -> Line:
    return Line(source=0, number=seq + 1, seq=seq, text=f"line {seq}", raw=f"line {seq}")


def _rule(
    rid: str = "r",
    *,
    category: str = "runtime_activation",
    priority: int = 100,
    confidence: float = 0.9,
    all_: tuple[Condition, ...] = (),
    any_: tuple[Condition, ...] = (),
    none_: tuple[Condition, ...] = (),
    refines: tuple[str, ...] = (),
) -> Rule:
    return Rule(
        id=rid,
        category=category,
        priority=priority,
        confidence=confidence,
        title=f"title of {rid}",
        advice="none",
        refines=refines,
        what="what",
        why="why",
        remedy="remedy",
        false_positives=("none",),
        references=("https://example.org",),
        all=all_,
        any=any_,
        none=none_,
        patterns=(),
        fire=(),
        silent=(),
        path=Path(f"{rid}.toml"),
    )


YES = Condition("a", "truthy")
NO = Condition("b", "truthy")
FEATS = {"a": Feature(True), "b": Feature(False)}


# --- all / any / none ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("all_", "any_", "none_", "fired"),
    [
        ((YES,), (), (), True),
        ((YES, YES), (), (), True),
        ((YES, NO), (), (), False),  # all must all hold
        ((), (YES,), (), True),
        ((), (NO, YES), (), True),  # any: one is enough
        ((), (NO, NO), (), False),  # any: a non-empty list needs one
        ((YES,), (NO,), (), False),
        ((YES,), (), (NO,), True),  # a none that does not hold vetoes nothing
        ((YES,), (), (NO, YES), False),  # any none that holds vetoes
        ((), (YES,), (YES,), False),
    ],
)
def test_all_any_none(
    all_: tuple[Condition, ...],
    any_: tuple[Condition, ...],
    none_: tuple[Condition, ...],
    fired: bool,
) -> None:
    assert fires(_rule(all_=all_, any_=any_, none_=none_), FEATS) is fired


# --- operators ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "value", "operand", "holds"),
    [
        ("truthy", True, None, True),
        ("truthy", 1, None, True),
        ("truthy", "x", None, True),
        ("truthy", False, None, False),
        ("truthy", 0, None, False),
        ("truthy", 0.0, None, False),
        ("truthy", "", None, False),
        ("truthy", None, None, False),
        ("eq", 5, 5, True),
        ("eq", 5.0, 5, True),
        ("eq", 5, 6, False),
        ("eq", "vllm", "vllm", True),
        ("eq", "vllm", "sglang", False),
        ("eq", None, "vllm", False),
        ("ne", 5, 6, True),
        ("ne", 5, 5, False),
        ("ne", "vllm", "sglang", True),
        ("lt", 1.5, 2.0, True),
        ("lt", 2.0, 2.0, False),
        ("le", 2.0, 2.0, True),
        ("le", 2.01, 2.0, False),
        ("gt", 2.01, 2.0, True),
        ("gt", 2.0, 2.0, False),
        ("ge", 2.0, 2.0, True),
        ("ge", 1.99, 2.0, False),
        ("lt", -5.4, 0, True),  # int operand, float value
        ("in", "weights", ["weights", "encoder"], True),
        ("in", "logits", ["weights", "encoder"], False),
        ("in", None, ["weights"], False),
        ("not_in", "logits", ["weights", "encoder"], True),
        ("not_in", "weights", ["weights", "encoder"], False),
    ],
)
def test_operators(op: str, value: Any, operand: Any, holds: bool) -> None:
    rule = _rule(all_=(Condition("x", op, operand),))
    assert fires(rule, {"x": Feature(value)}) is holds


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("operand", [-1.0, 0, 2.0])
def test_unknown_numbers_satisfy_no_comparison(op: str, operand: float) -> None:
    cond = (Condition("x", op, operand),)
    assert fires(_rule(all_=cond), {"x": Feature(None)}) is False
    assert fires(_rule(all_=cond), {}) is False  # a feature nobody computed is unknown too


def test_unknown_value_is_not_equal_to_anything() -> None:
    """None ≠ 5 holds: ``ne`` is not a numeric comparison, so unknown does not block it
    (the behaviour today; no built-in rule uses ``ne``)."""
    assert fires(_rule(all_=(Condition("x", "ne", 5),)), {"x": Feature(None)}) is True
    assert fires(_rule(all_=(Condition("x", "not_in", [5]),)), {}) is True


@pytest.mark.parametrize(
    ("op", "value", "operand"),
    [
        ("gt", True, 0),  # True > 0 in Python; a flag is not a number here
        ("ge", True, 1),
        ("lt", False, 1),
        ("le", False, 0),
        ("gt", "10", 5),  # a string is never compared numerically (nor raises)
        ("lt", "1", 5),
        ("lt", 1, True),  # nor is a bool or str operand
        ("ge", 1, True),
        ("lt", 5, "6"),
        ("gt", 5, "4"),
    ],
)
def test_bools_and_strings_are_not_ordered(op: str, value: Any, operand: Any) -> None:
    assert fires(_rule(all_=(Condition("x", op, operand),)), {"x": Feature(value)}) is False


@pytest.mark.parametrize(
    ("op", "value", "operand"),
    [("eq", True, 1), ("eq", 0, False), ("in", True, [1, 2]), ("ne", True, True)],
)
def test_bools_are_not_numbers_for_equality(op: str, value: Any, operand: Any) -> None:
    assert fires(_rule(all_=(Condition("x", op, operand),)), {"x": Feature(value)}) is False


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        ("CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ("Not enough memory", False),
        (None, False),
        (2.0, False),  # not a string: never matches, even though str(2.0) would
        (True, False),
        (12, False),
    ],
)
def test_matches_only_strings(value: Any, holds: bool) -> None:
    cond = Condition("x", "matches", regex.compile(r"out of memory|^2\.0$|^True$|12"))
    assert fires(_rule(all_=(cond,)), {"x": Feature(value)}) is holds


def test_unknown_operator_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown operator"):
        fires(_rule(all_=(Condition("x", "between", (1, 2)),)), {"x": Feature(1.5)})


# --- evidence and order -------------------------------------------------------------------------


def test_evidence_comes_only_from_conditions_that_hold() -> None:
    feats = {
        "a": Feature(True, (_line(5), _line(1))),
        "b": Feature(False, (_line(2),)),  # an `any` that does not hold
        "c": Feature(3.0, (_line(3), _line(1))),  # shares line 1 with `a`
        "d": Feature(False, (_line(4),)),  # a `none` that does not hold
    }
    rule = _rule(
        all_=(Condition("a", "truthy"),),
        any_=(Condition("b", "truthy"), Condition("c", "gt", 2)),
        none_=(Condition("d", "truthy"),),
    )
    (finding,) = evaluate([rule], feats)
    assert finding.rule is rule
    # sorted by seq, line 1 once
    assert [e.line.seq for e in finding.evidence] == [1, 3, 5]
    assert all(e.note is None for e in finding.evidence)


def test_evidence_is_capped() -> None:
    assert MAX_EVIDENCE_LINES == 8
    lines = tuple(_line(s) for s in (30, 2, 25, 7, 11, 19, 4, 40, 1, 13, 9, 33))
    (finding,) = evaluate([_rule(all_=(YES,))], {"a": Feature(True, lines)})
    # the 8 earliest of 12: 1 2 4 7 9 11 13 19
    assert [e.line.seq for e in finding.evidence] == [1, 2, 4, 7, 9, 11, 13, 19]


def test_findings_by_priority_ties_in_rule_order() -> None:
    rules = [
        _rule("low", priority=10, all_=(YES,)),
        _rule("tie-b", priority=50, all_=(YES,)),
        _rule("silent", priority=999, all_=(NO,)),
        _rule("high", priority=90, all_=(YES,)),
        _rule("tie-a", priority=50, all_=(YES,)),
    ]
    ids = [f.rule.id for f in evaluate(rules, FEATS)]
    assert ids == ["high", "tie-b", "tie-a", "low"]  # not by id: in the order given


def test_no_rule_fires() -> None:
    assert evaluate([_rule(all_=(NO,))], FEATS) == ()
    assert engine.evaluate([], FEATS) == ()


# --- a rule file, through the real loader ------------------------------------------------------

RULE_TOML = """\
id = "test-big-foreign"
category = "cotenant_pressure"
priority = 500
confidence = 0.85
title = "A test rule"
advice = "free_gpu"

[docs]
what = "what"
why = "why"
remedy = "remedy"
false_positives = ["none"]
references = ["https://example.org"]

[when]
all = ["oom.present", { key = "oom.foreign_gib", ge = 2.0 }]
any = [
    { key = "failure.site", in = ["kv_pool", "forward"] },
    { key = "failure.message", matches = "Tried to allocate [0-9.]+ GiB" },
]
none = [{ key = "engine.family", eq = "vllm" }]

[fixtures]
fire = ["missing-fire.log"]
silent = ["missing-silent.log"]
"""


def test_rule_loaded_from_toml(tmp_path: Path) -> None:
    (tmp_path / "test-big-foreign.toml").write_text(RULE_TOML, encoding="utf-8")
    loaded = {r.id: r for r in pipeline.load_rules([tmp_path])}
    rule = loaded["test-big-foreign"]
    assert rule.all[0] == Condition("oom.present", "truthy", None)
    assert rule.all[1] == Condition("oom.foreign_gib", "ge", 2.0)
    assert rule.any[0] == Condition("failure.site", "in", ["kv_pool", "forward"])
    assert rule.any[1].op == "matches" and hasattr(rule.any[1].operand, "search")

    base = {
        "oom.present": Feature(True),
        "oom.foreign_gib": Feature(20.02),
        "failure.site": Feature("logits"),
        "failure.message": Feature("CUDA out of memory. Tried to allocate 4.00 GiB."),
        "engine.family": Feature("sglang"),
    }
    assert fires(rule, base)
    assert not fires(rule, {**base, "oom.foreign_gib": Feature(1.99)})
    assert not fires(rule, {**base, "oom.foreign_gib": Feature(None)})
    assert not fires(rule, {**base, "failure.message": Feature("Tried to allocate 512 MiB")})
    assert fires(
        rule, {**base, "failure.message": Feature(None), "failure.site": Feature("forward")}
    )
    assert not fires(rule, {**base, "engine.family": Feature("vllm")})


# --- verdict confidence -------------------------------------------------------------------------


def _findings(*rules: Rule) -> list[Finding]:
    return [Finding(r, ()) for r in rules]


WINNER = _rule("winner", category="runtime_activation", priority=100, confidence=0.9)


@pytest.mark.parametrize(
    ("others", "expected"),
    [
        ((), 0.9),
        # another category within AMBIGUITY_GAP (10): 0.9 − 0.1
        ((_rule("rival", category="cotenant_pressure", priority=95),), 0.8),
        ((_rule("rival", category="cotenant_pressure", priority=100),), 0.8),
        ((_rule("rival", category="cotenant_pressure", priority=90),), 0.8),  # 100 − 10: within
        ((_rule("far", category="cotenant_pressure", priority=89),), 0.9),  # 11 below: no rival
        ((_rule("same", category="runtime_activation", priority=99),), 0.9),  # same category
        # two rivals: the penalty applies once
        (
            (
                _rule("r1", category="cotenant_pressure", priority=99),
                _rule("r2", category="not_oom", priority=98),
            ),
            0.8,
        ),
    ],
)
def test_confidence(others: tuple[Rule, ...], expected: float) -> None:
    assert verdict.AMBIGUITY_GAP == 10
    assert verdict.AMBIGUITY_PENALTY == 0.1
    assert verdict.confidence(_findings(WINNER, *others)) == expected


def test_a_rule_the_winner_refines_is_no_rival() -> None:
    winner = WINNER._replace(refines=("general",))
    general = _rule("general", category="cotenant_pressure", priority=99)
    assert verdict.confidence(_findings(winner, general)) == 0.9
    # ... but a rival after it still counts
    rival = _rule("rival", category="not_oom", priority=95)
    assert verdict.confidence(_findings(winner, general, rival)) == 0.8


def test_refines_is_one_way() -> None:
    # the runner-up refines the winner: the winner is still rivalled
    runner_up = _rule("special", category="cotenant_pressure", priority=99, refines=("winner",))
    assert verdict.confidence(_findings(WINNER, runner_up)) == 0.8


@pytest.mark.parametrize(
    ("confidence", "expected"),
    [
        (0.1, 0.05),  # 0.1 − 0.1 = 0: floor
        (0.12, 0.05),  # 0.02: floor
        (0.15, 0.05),  # 0.05 (0.04999… in floats): floor, then 0.05
        (0.16, 0.06),  # 0.16 − 0.1
        (0.85, 0.75),  # 0.7499999999999999 rounds to 0.75
    ],
)
def test_confidence_floor_and_rounding(confidence: float, expected: float) -> None:
    winner = WINNER._replace(confidence=confidence)
    rival = _rule("rival", category="cotenant_pressure", priority=100)
    assert verdict.confidence(_findings(winner, rival)) == expected


def test_decide_unknown_without_findings(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_text("hello\nnothing to see here\n", encoding="utf-8")
    incident = pipeline.read([str(path)], pipeline.load_rules())
    v = verdict.decide([], incident, SglangBudget(), None)
    assert (v.category, v.confidence, v.rule) == ("unknown", 0.0, None)
    assert v.summary.startswith("No GPU out-of-memory evidence found")
    assert "Nothing in the input looked like" in v.summary


def test_decide_takes_the_first_finding(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_text("hello\n", encoding="utf-8")
    incident = pipeline.read([str(path)], pipeline.load_rules())
    rival = _rule("rival", category="cotenant_pressure", priority=95)
    v = verdict.decide(_findings(WINNER, rival), incident, SglangBudget(), None)
    assert (v.category, v.rule, v.confidence) == ("runtime_activation", "winner", 0.8)
    assert v.summary == "title of winner."
    assert dict(v.explanation) == {"what": "what", "why": "why", "remedy": "remedy"}
