"""``oomdoctor rules``: list, show and self-test the rules; the knowledge tables; feature names."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from oomdoctor.cli.common import (
    EXIT_OK,
    EXIT_OOM,
    EXIT_USAGE,
    fail,
    load_rules,
    load_rules_and_knowledge,
    rules_option,
    write_output,
)


def _show(lines: Iterable[str]) -> None:
    """Lines on stdout, each one line with its secrets masked and its control characters shown
    (a rule file's text is foreign: no OSC 52, clear-screen or erase-line reaches the terminal);
    a reader that went away ends it quietly, a full disk exits 3."""
    from oomdoctor.report.terminal import safe_line

    write_output("".join(f"{safe_line(line)}\n" for line in lines), None)


@click.group()
def rules() -> None:
    """List, show and test the rules."""


@rules.command("list")
@rules_option
def rules_list(rule_dirs: tuple[str, ...]) -> None:
    """One line per rule: id, category, priority, title."""
    rows = sorted(load_rules(rule_dirs), key=lambda r: (-r.priority, r.id))
    _show(f"{r.id:<28} {r.category:<20} {r.priority:>4}  {r.title}" for r in rows)


@rules.command("show")
@click.argument("rule_id")
@rules_option
def rules_show(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """Everything a rule says: docs, conditions, fixtures."""
    loaded = load_rules(rule_dirs)
    rule = next((r for r in loaded if r.id == rule_id), None)
    if rule is None:
        fail(f'no such rule: "{rule_id}"', "`oomdoctor rules list` shows the ids", EXIT_USAGE)

    def cond(c: Any) -> str:
        return (
            c.key
            if c.op == "truthy"
            else f"{c.key} {c.op} {getattr(c.operand, 'pattern', c.operand)!r}"
        )

    lines = [
        f"{rule.id}: {rule.title}",
        f"category: {rule.category}   priority: {rule.priority}   confidence: {rule.confidence}",
        f"advice: {rule.advice}   file: {rule.path}",
        "",
        f"what: {rule.what}",
        f"why: {' '.join(rule.why.split())}",
        f"remedy: {rule.remedy}",
        "false positives:",
        *(f"  - {fp}" for fp in rule.false_positives),
        "references:",
        *(f"  - {ref}" for ref in rule.references),
        "when:",
        *(f"  all:  {cond(c)}" for c in rule.all),
        *(f"  any:  {cond(c)}" for c in rule.any),
        *(f"  none: {cond(c)}" for c in rule.none),
        *(
            f"pattern {p.name}: anchor {p.anchor!r}, regex {p.regex.pattern!r}"
            for p in rule.patterns
        ),
        "fires on:",
        *(f"  {p}" for p in rule.fire),
        "silent on:",
        *(f"  {p}" for p in rule.silent),
    ]
    _show(lines)


@rules.command("test")
@click.argument("rule_dir", required=False, type=click.Path(file_okay=False))
def rules_test(rule_dir: str | None) -> None:
    """Check every rule (built-in, plus DIR's) fires on its fixtures and stays silent on its confusers."""
    from oomdoctor.pipeline import fixture_features
    from oomdoctor.report.terminal import safe_line
    from oomdoctor.rules.selftest import check_rules

    # Resolved first: the rules' paths, and their fixtures' (relative to each rule file), are
    # then absolute, whatever the working directory and however DIR was written.
    directory = Path(rule_dir).resolve() if rule_dir else None
    loaded, knowledge = load_rules_and_knowledge((str(directory),) if directory else ())
    selected = [
        r for r in loaded if directory is None or Path(r.path).resolve().parent == directory
    ]
    if directory is not None and not selected:
        fail(
            f"{rule_dir}: no rules to test (its *.toml files hold engine markers or sites only)",
            "a rule file has an id, a category and [when] conditions (README.md: Writing a rule)",
        )
    failures = 0
    shown = True  # until stdout's reader goes away (`| head`): the status still counts them all
    for result in check_rules(selected, fixture_features(loaded, knowledge)):
        status = "ok  " if result.ok else "FAIL"
        failures += not result.ok
        lines = safe_line(f"{status} {result.rule:<28} {result.expect:<6} {result.fixture}")
        if not result.ok:
            lines += f"\n     {safe_line(result.detail)}"
        shown = shown and write_output(lines + "\n", None)
    if shown:
        write_output(f"{failures} failure(s)\n", None)
    sys.exit(EXIT_OOM if failures else EXIT_OK)


@rules.command("markers")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add the markers in DIR.")
def rules_markers(rule_dirs: tuple[str, ...]) -> None:
    """The knowledge tables: how the engine is told from a line, and the site and phase marks."""
    knowledge = load_rules_and_knowledge(rule_dirs)[1]
    lines = ["engine markers (engine, where, match):"]
    for m in knowledge.markers:
        role = f" [{m.role}]" if m.role else ""
        lines.append(f"  {m.engine:<18} {m.where:<8} {m.match}{role}")
    for title, table in (("sites", knowledge.sites), ("phases", knowledge.phases)):
        lines.append(f"{title} (in precedence order):")
        for marks in table:
            parts = [*marks.frames, *(f"code {c}" for c in marks.code)]
            parts += [f"text {t}" for t in marks.text]
            parts += [f"stage /{s.pattern}/" for s in marks.stages]
            lines.append(f"  {marks.name:<14} " + ", ".join(parts))
    _show(lines)


@rules.command("features")
def rules_features() -> None:
    """The feature names rule conditions can use."""
    from oomdoctor.rules.feature_docs import FEATURE_DOCS

    _show(f"{name:<36} {doc}" for name, doc in FEATURE_DOCS.items())


@rules.command("advice")
def rules_advice() -> None:
    """The advice kinds a rule's `advice` key can name."""
    from oomdoctor.rules.schema import ADVICE_KINDS

    _show(f"{name:<20} {doc}" for name, doc in ADVICE_KINDS.items())
