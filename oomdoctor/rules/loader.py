"""Load and validate rule files (TOML, one rule per file) into the records of rules/schema.py.

Every problem in every file is collected and reported as ``file:line: message`` before anything
runs; a rule set is either entirely valid or refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.knowledge import RESERVED_FILES, toml_file
from oomdoctor.model import CATEGORIES
from oomdoctor.rules import conditions
from oomdoctor.rules.schema import (
    ADVICE_KINDS,
    DOC_KEYS,
    ID,
    TOP_KEYS,
    Condition,
    FixtureRef,
    Rule,
    RuleError,
    RulePattern,
    builtin_dir,
)


def load(dirs: Iterable[Path], fact_kinds: Iterable[str]) -> tuple[Rule, ...]:
    """Load every ``*.toml`` in ``dirs`` (in order); raise RuleError listing all problems.

    Fixture files need not exist to diagnose; ``rules test`` reports missing ones.
    """
    problems: list[str] = []
    rules: list[Rule] = []
    kinds = set(fact_kinds)
    seen: dict[str, Path] = {}
    shipped = os.path.realpath(builtin_dir())
    for directory in dirs:
        # A user's rules: `rules test` opens only fixtures inside their directory, and their
        # verdicts say where they came from.
        user = os.path.realpath(directory) != shipped
        if not directory.is_dir():
            problems.append(f"{directory}: not a directory of rule files")
            continue
        files = sorted(p for p in directory.glob("*.toml") if p.name not in RESERVED_FILES)
        if not files and not any((directory / name).is_file() for name in RESERVED_FILES):
            problems.append(f"{directory}: no *.toml rule files")
        for path in files:
            rule = _load_file(path, kinds, problems, user)
            if rule is None:
                continue
            if rule.id in seen:
                problems.append(
                    f"{path}:{_line_of(path.read_text('utf-8', 'replace'), 'id')}: duplicate rule id "
                    f'"{rule.id}" (also in {seen[rule.id]})'
                )
                continue
            seen[rule.id] = path
            rules.append(rule)
    ids = {r.id for r in rules}
    for rule in rules:
        for other in rule.refines:
            if other not in ids:
                text = rule.path.read_text("utf-8", "replace")
                problems.append(
                    f'{rule.path}:{_line_of(text, "refines")}: refines unknown rule "{other}"'
                )
    if problems:
        raise RuleError(problems)
    return tuple(rules)


_PATTERNS_HEADER = LazyPattern(r"^\s*\[\[\s*patterns\s*\]\]")  # only rules with patterns


def _line_of(text: str, key: str, table: str | None = None) -> int:
    """The line where ``key`` is set (inside ``[table]`` when given); 1 if it cannot be found."""
    lines = text.splitlines()
    start = 0
    if table is not None:
        for i, line in enumerate(lines):
            if re.match(rf"^\s*\[+\s*{re.escape(table)}\s*\]+", line):
                start = i
                break
    pat = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i in range(start, len(lines)):
        if pat.match(lines[i]):
            return i + 1
    return start + 1 if table is not None else 1


def _load_file(path: Path, kinds: set[str], problems: list[str], user: bool = True) -> Rule | None:
    read = toml_file.read(path)
    if isinstance(read, str):
        problems.append(read)
        return None
    text, data = read
    before = len(problems)

    def err(message: str, key: str, table: str | None = None) -> None:
        problems.append(f"{path}:{_line_of(text, key, table)}: {message}")

    for key in data:
        if key not in TOP_KEYS:
            err(f'unknown key "{key}"', key)
    rid = data.get("id")
    if not isinstance(rid, str) or not ID.match(rid):
        err('"id" must be lower-case words joined by "-", e.g. "startup-kv-no-room"', "id")
        rid = path.stem
    category = data.get("category")
    if category not in CATEGORIES:
        err(f'"category" must be one of {", ".join(CATEGORIES)}', "category")
    priority = data.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 1000:
        err('"priority" must be an integer from 0 to 1000', "priority")
        priority = 0
    confidence = data.get("confidence", 0.8)
    if not isinstance(confidence, int | float) or not 0 < confidence <= 1:
        err('"confidence" must be a number in (0, 1]', "confidence")
        confidence = 0.5
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        err('"title" is required', "title")
    advice = data.get("advice", "none")
    if not isinstance(advice, str) or advice not in ADVICE_KINDS:
        err(f'"advice" must be one of {", ".join(ADVICE_KINDS)}', "advice")
    refines = data.get("refines", [])
    if not isinstance(refines, list) or not all(isinstance(r, str) for r in refines):
        err('"refines" must be a list of rule ids this rule is a more specific case of', "refines")
        refines = []

    docs = data.get("docs")
    if not isinstance(docs, dict):
        err(
            "a [docs] table with what, why, remedy, false_positives, references is required", "docs"
        )
        docs = {}
    for key in docs:
        if key not in DOC_KEYS:
            err(f'unknown key "{key}" in [docs]', key, "docs")
    for key in ("what", "why", "remedy"):
        if not isinstance(docs.get(key), str) or not docs[key].strip():
            err(f'[docs] needs "{key}" (text)', key, "docs")
    for key in ("false_positives", "references"):
        value = docs.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            err(f'[docs] needs "{key}" (a non-empty list of strings)', key, "docs")

    places: list[str] = []  # where each [[patterns]] entry is: only read when there are some
    if "patterns" in data:
        headers = [i + 1 for i, ln in enumerate(text.splitlines()) if _PATTERNS_HEADER.match(ln)]
        places = [f"{path}:{n}" for n in headers] or [f"{path}:{_line_of(text, 'patterns')}"]
    patterns = _patterns(data.get("patterns", []), rid, err, places)
    pattern_names = {f"pattern.{p.rule}.{p.name}" for p in patterns}
    when = data.get("when")
    conds: dict[str, tuple[Condition, ...]] = {"all": (), "any": (), "none": ()}
    if not isinstance(when, dict):
        err('a [when] table with "all", "any" and/or "none" is required', "when")
    else:
        for key in when:
            if key not in conds:
                err(f'unknown key "{key}" in [when] (use all, any, none)', key, "when")
        for group in conds:
            conds[group] = conditions.parse(when.get(group, []), group, kinds, pattern_names, err)
        if not conds["all"] and not conds["any"]:
            err('[when] needs at least one condition in "all" or "any"', "when")

    doubts = conditions.doubts(data.get("doubt", []), kinds, pattern_names, err)
    question = docs.get("question", "") if isinstance(docs, dict) else ""
    if not isinstance(question, str):
        err('[docs] "question" must be text', "question", "docs")
        question = ""

    fixtures = data.get("fixtures")
    fire: tuple[FixtureRef, ...] = ()
    silent: tuple[FixtureRef, ...] = ()
    if not isinstance(fixtures, dict):
        err("a [fixtures] table with fire = [...] and silent = [...] is required", "fixtures")
    else:
        for key in fixtures:
            if key not in ("fire", "silent"):
                err(f'unknown key "{key}" in [fixtures]', key, "fixtures")
        fire = _fixture_paths(path, fixtures.get("fire"), "fire", err)
        silent = _fixture_paths(path, fixtures.get("silent"), "silent", err)

    if len(problems) > before:
        return None
    return Rule(
        id=rid,
        category=str(category),
        priority=int(priority),
        confidence=float(confidence),
        title=str(title).strip(),
        advice=str(advice),
        refines=tuple(refines),
        what=docs["what"].strip(),
        why=docs["why"].strip(),
        remedy=docs["remedy"].strip(),
        false_positives=tuple(docs["false_positives"]),
        references=tuple(docs["references"]),
        all=conds["all"],
        any=conds["any"],
        none=conds["none"],
        patterns=patterns,
        fire=fire,
        silent=silent,
        path=path,
        doubts=doubts,
        question=question.strip(),
        user=user,
    )


def _patterns(raw: Any, rid: str, err: Any, places: list[str]) -> tuple[RulePattern, ...]:
    if not isinstance(raw, list):
        err('"patterns" must be an array of tables ([[patterns]])', "patterns")
        return ()
    out: list[RulePattern] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            err("each [[patterns]] entry must be a table", "patterns")
            continue
        for key in item:
            if key not in ("name", "anchor", "regex"):
                err(f'unknown key "{key}" in [[patterns]]', key, "patterns")
        name, anchor, source = item.get("name"), item.get("anchor"), item.get("regex")
        if not isinstance(name, str) or not re.fullmatch(r"\w+", name):
            err('[[patterns]] "name" must be a word', "name", "patterns")
            continue
        if not isinstance(anchor, str) or len(anchor) < 3:
            err(
                f'pattern "{name}": "anchor" must be a literal of 3+ characters found in every '
                "matching line (it drives the fast prefilter)",
                "anchor",
                "patterns",
            )
            continue
        if not isinstance(source, str):
            err(f'pattern "{name}": "regex" is required', "regex", "patterns")
            continue
        import regex  # only rule files with patterns pay for it

        try:
            compiled = regex.compile(source)
        except regex.error as exc:
            err(f'pattern "{name}": invalid regex: {exc}', "regex", "patterns")
            continue
        where = places[min(index, len(places) - 1)]
        out.append(RulePattern(rid, name, anchor, compiled, where))
    return tuple(out)


def _joined(base: Path, relative: str) -> Path:
    """``base/relative`` with ``..`` folded, without touching the disk (every run loads the rules;
    only ``rules test`` opens the fixtures): joined as strings, so one Path is made, not two."""
    return Path(os.path.normpath(os.path.join(base, relative)))  # noqa: PTH118


def _fixture_paths(rule_path: Path, raw: Any, key: str, err: Any) -> tuple[FixtureRef, ...]:
    """Fixture entries, relative to the rule file: a log path, or a table
    ``{ log = "x.log", snapshot = ["gpu.xml"], evidence = [44] }``: the GPU snapshot the log is
    diagnosed with, and (fire only) the lines that must be among the finding's evidence."""
    if not isinstance(raw, list) or not raw:
        err(f'[fixtures] "{key}" must be a non-empty list', key, "fixtures")
        return ()
    base = rule_path.parent
    out = []
    for item in raw:
        if isinstance(item, str):
            out.append(FixtureRef(_joined(base, item)))
            continue
        table = item if isinstance(item, dict) else {}
        log = table.get("log")
        snaps = table.get("snapshot", [])
        lines = table.get("evidence", [])
        if isinstance(snaps, str):
            snaps = [snaps]
        unknown = sorted(set(table) - {"log", "snapshot", "evidence"})
        if (
            not isinstance(log, str)
            or not isinstance(snaps, list)
            or not all(isinstance(x, str) for x in snaps)
            or not isinstance(lines, list)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lines)
            or unknown
        ):
            err(
                f'[fixtures] {key}: an entry is a path or {{ log = "...", snapshot = [...], '
                "evidence = [line numbers] }"
                + (f" (unknown key {', '.join(unknown)})" if unknown else ""),
                key,
                "fixtures",
            )
            continue
        if lines and key != "fire":
            err(
                f"[fixtures] {key}: evidence lines belong to the logs a rule fires on",
                key,
                "fixtures",
            )
            continue
        out.append(
            FixtureRef(_joined(base, log), tuple(_joined(base, x) for x in snaps), tuple(lines))
        )
    return tuple(out)
