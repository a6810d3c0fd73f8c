"""A rule file's conditions ([when] and [[doubt]] tables): parsed and validated, each problem
reported through the loader's ``err(message, key, table)``."""

from __future__ import annotations

import math
from typing import Any

from oomdoctor.model import CATEGORIES
from oomdoctor.rules.feature_docs import FEATURE_DOCS
from oomdoctor.rules.schema import DOUBT_KEYS, OPS, Condition, Doubt


def _known(key: str, kinds: set[str], pattern_names: set[str]) -> bool:
    if key in FEATURE_DOCS or key in pattern_names:
        return True
    return key.startswith("fact.") and key[5:] in kinds


def parse(
    raw: Any, group: str, kinds: set[str], pattern_names: set[str], err: Any
) -> tuple[Condition, ...]:
    if not isinstance(raw, list):
        err(f'[when] "{group}" must be a list', group, "when")
        return ()
    out: list[Condition] = []
    for item in raw:
        key: Any
        if isinstance(item, str):
            key, op, operand = item, "truthy", None
        elif isinstance(item, dict):
            key = item.get("key")
            ops = [k for k in item if k != "key"]
            if len(ops) != 1 or ops[0] not in OPS:
                err(
                    f'a condition needs "key" and exactly one of {", ".join(OPS)}; got {sorted(item)}',
                    group,
                    "when",
                )
                continue
            op, operand = ops[0], item[ops[0]]
            wrong = _operand_problem(op, operand)
            if wrong is not None:
                err(f"condition on {key}: {wrong}", group, "when")
                continue
            if op == "matches":
                import regex

                try:
                    operand = regex.compile(operand)
                except (regex.error, RecursionError, OverflowError) as exc:
                    err(f"invalid regex in condition on {key}: {exc}", group, "when")
                    continue
        else:
            err(
                f"a condition is a feature name or a table, not {type(item).__name__}",
                group,
                "when",
            )
            continue
        if not isinstance(key, str) or not _known(key, kinds, pattern_names):
            err(f'unknown feature "{key}" (see `oomdoctor rules features`)', group, "when")
            continue
        out.append(Condition(key, op, operand))
    return tuple(out)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _operand_problem(op: str, operand: object) -> str | None:
    """What is wrong with a condition's operand for its operator (features are numbers, booleans
    and strings; a TOML date, array or table compares with none of them), or None."""
    if op in ("lt", "le", "gt", "ge"):
        if not _is_number(operand):
            return f'"{op}" needs a number, not {_toml_type(operand)}'
        if not math.isfinite(operand):  # type: ignore[arg-type]
            return f'"{op}" needs a finite number, not {operand}'
    elif op in ("eq", "ne"):
        if not isinstance(operand, str | int | float | bool):
            return f'"{op}" needs a number, a boolean or a string, not {_toml_type(operand)}'
    elif op in ("in", "not_in"):
        if not isinstance(operand, list) or not all(
            isinstance(v, str | int | float | bool) for v in operand
        ):
            return f'"{op}" needs a list of numbers, booleans or strings'
    elif op == "matches" and not isinstance(operand, str):
        return f'"matches" needs a regex as a string, not {_toml_type(operand)}'
    return None


def _toml_type(value: object) -> str:
    """A value's type as TOML names it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"  # date, time, datetime


def doubts(raw: Any, kinds: set[str], pattern_names: set[str], err: Any) -> tuple[Doubt, ...]:
    """The [[doubt]] tables: conditions as in [when], a confidence, an alternative, a question."""
    if not isinstance(raw, list):
        err('"doubt" must be an array of tables ([[doubt]])', "doubt")
        return ()
    out: list[Doubt] = []
    for item in raw:
        if not isinstance(item, dict):
            err("each [[doubt]] entry must be a table", "doubt")
            continue
        for key in item:
            if key not in DOUBT_KEYS:
                err(f'unknown key "{key}" in [[doubt]]', key, "doubt")
        groups = {
            g: parse(item.get(g, []), g, kinds, pattern_names, err) for g in ("all", "any", "none")
        }
        confidence, alternative, question = (
            item.get("confidence"),
            item.get("alternative"),
            item.get("question"),
        )
        if not isinstance(confidence, int | float) or not _is_number(confidence):
            err('[[doubt]] needs "confidence" between 0 and 1', "confidence", "doubt")
            continue
        if not 0.0 <= confidence <= 1.0:
            err('[[doubt]] needs "confidence" between 0 and 1', "confidence", "doubt")
            continue
        if alternative not in CATEGORIES:
            err(
                f'[[doubt]] "alternative" must be a category ({", ".join(CATEGORIES)})',
                "alternative",
                "doubt",
            )
            continue
        if not isinstance(question, str) or not question.strip():
            err('[[doubt]] needs "question": what would settle it', "question", "doubt")
            continue
        if not groups["all"] and not groups["any"]:
            err('[[doubt]] needs at least one condition in "all" or "any"', "doubt")
            continue
        out.append(
            Doubt(
                groups["all"],
                groups["any"],
                groups["none"],
                float(confidence),
                str(alternative),
                question.strip(),
            )
        )
    return tuple(out)
