"""Every rule against its own fixtures (one pytest case each), and the rule set's own hygiene."""

from __future__ import annotations

import pytest

from oomdoctor import pipeline
from oomdoctor.rules.features import FEATURE_DOCS
from oomdoctor.rules.schema import FixtureRef, Rule
from oomdoctor.rules.selftest import check
from tests.conftest import FIXTURES, RULES

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
