"""Every rule against its own fixtures (one pytest case each), and the rule set's own hygiene."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.rules.feature_docs import FEATURE_DOCS
from oomdoctor.rules.loader import load
from oomdoctor.rules.schema import FixtureRef, Rule, RuleError
from oomdoctor.rules.selftest import check
from tests.conftest import FIXTURES, RULES, minimal_rule

BUILTIN = pipeline.load_rules()
CASES = [(r, "fire", f) for r in BUILTIN for f in r.fire] + [
    (r, "silent", f) for r in BUILTIN for f in r.silent
]


@pytest.mark.parametrize(
    ("rule", "expect", "fixture"),
    CASES,
    ids=[
        f"{r.id}-{e}-{f.log.relative_to(FIXTURES)}" + ("+snapshot" if f.snapshots else "")
        for r, e, f in CASES
    ],
)
def test_rule_on_its_fixture(rule: Rule, expect: str, fixture: FixtureRef) -> None:
    result = check(rule, fixture, expect, pipeline.fixture_features(BUILTIN))
    assert result.ok, result.detail


def test_ids_match_file_names_and_are_unique() -> None:
    ids = [r.id for r in BUILTIN]
    assert len(ids) == len(set(ids))
    for rule in BUILTIN:
        assert rule.path.stem == rule.id


def test_every_rule_has_docs_and_both_kinds_of_fixture() -> None:
    for rule in BUILTIN:
        assert rule.fire and rule.silent, rule.id
        assert rule.what and rule.why and rule.remedy, rule.id
        assert rule.false_positives and rule.references, rule.id
        assert all(ref.startswith("https://") for ref in rule.references), rule.id


def test_every_fire_fixture_names_its_evidence_lines() -> None:
    """A rule that fires for the wrong reason fails its fixture (test_rule_on_its_fixture checks
    the lines), so every log a shipped rule fires on says which lines must be the evidence."""
    bare = [f"{r.id}: {f.log.name}" for r in BUILTIN for f in r.fire if not f.evidence]
    assert not bare, bare


def test_a_wrong_evidence_line_fails_the_fixture() -> None:
    rule = next(r for r in BUILTIN if r.id == "startup-kv-no-room")
    fixture = next(f for f in rule.fire if f.log.name == "worked-example-y070.log")
    assert fixture.evidence == (44,)  # RuntimeError: Not enough memory ...
    moved = fixture._replace(evidence=(43,))
    result = check(rule, moved, "fire", pipeline.fixture_features(BUILTIN))
    assert not result.ok and "[43]" in result.detail and "[44]" in result.detail


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('{ log = "a.log", evidence = ["44"] }', "evidence = [line numbers]"),
        ('{ log = "a.log", evidence = [0] }', "evidence = [line numbers]"),
        ('{ log = "a.log", lines = [4] }', "unknown key lines"),
    ],
)
def test_bad_fixture_entries_are_refused(tmp_path: Path, entry: str, message: str) -> None:
    (tmp_path / "x.toml").write_text(
        minimal_rule(fixtures=f'fire = [{entry}]\nsilent = ["b.log"]'), encoding="utf-8"
    )
    with pytest.raises(RuleError) as caught:
        load([tmp_path], pipeline.fact_kinds())
    assert any(message in problem for problem in caught.value.problems), caught.value.problems


def test_evidence_lines_belong_to_fire_fixtures(tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text(
        minimal_rule(fixtures='fire = ["a.log"]\nsilent = [{ log = "b.log", evidence = [3] }]'),
        encoding="utf-8",
    )
    with pytest.raises(RuleError) as caught:
        load([tmp_path], pipeline.fact_kinds())
    assert any("belong to the logs a rule fires on" in p for p in caught.value.problems)


def test_every_fixture_is_used_by_a_rule() -> None:
    used = {f.log for r in BUILTIN for f in (*r.fire, *r.silent)}
    unused = [p.relative_to(FIXTURES) for p in FIXTURES.rglob("*.log") if p.resolve() not in used]
    assert not unused, f"fixtures no rule fires or stays silent on: {unused}"


def test_every_fixture_has_a_sidecar() -> None:
    missing = [
        p.relative_to(FIXTURES)
        for p in FIXTURES.rglob("*.log")
        if not p.with_name(p.name[:-4] + ".expect.toml").is_file()
    ]
    assert not missing


def test_rules_only_name_documented_features() -> None:
    for rule in BUILTIN:
        for cond in (*rule.all, *rule.any, *rule.none):
            assert cond.key in FEATURE_DOCS or cond.key.split(".")[0] in ("fact", "pattern"), (
                cond.key
            )


def test_rules_dir_holds_only_rules() -> None:
    assert {p.suffix for p in RULES.iterdir()} == {".toml"}
