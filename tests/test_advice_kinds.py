"""The advice kinds are defined once (rules/schema.py ADVICE_KINDS); everything else agrees with it:
the registry, the rule loader's validation, the shipped rules and the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.advice.registry import REGISTRY
from oomdoctor.rules.loader import load
from oomdoctor.rules.schema import ADVICE_KINDS, RuleError
from tests.conftest import REPO, minimal_rule

ENGINES = {"sglang", "vllm", "any"}


def test_registry_has_exactly_the_kinds() -> None:
    assert list(REGISTRY) == list(ADVICE_KINDS)


@pytest.mark.parametrize("kind", list(ADVICE_KINDS))
def test_every_kind_serves_both_engines(kind: str) -> None:
    entry = REGISTRY[kind]
    assert set(entry) <= ENGINES, entry
    assert "any" in entry or {"sglang", "vllm"} <= set(entry), f"{kind}: {sorted(entry)}"


def test_readme_lists_exactly_the_kinds() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    start = readme.index("Advice kinds")
    paragraph = readme[start : readme.index("\n\n", start)]
    listed = re.findall(r"`([a-z_]+)`", paragraph)
    assert sorted(listed) == sorted(ADVICE_KINDS), paragraph


def test_rules_advice_prints_the_table() -> None:
    from click.testing import CliRunner

    from oomdoctor.cli import cli

    result = CliRunner().invoke(cli, ["rules", "advice"])
    assert result.exit_code == 0
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert names == list(ADVICE_KINDS)


def test_shipped_rules_use_only_defined_kinds() -> None:
    used = {rule.advice for rule in pipeline.load_rules()}
    assert used <= set(ADVICE_KINDS)
    assert len(used) > 5  # the table is really used, not bypassed


def test_the_loader_refuses_an_unknown_kind_naming_the_defined_ones(tmp_path: Path) -> None:
    rule = tmp_path / "x.toml"
    rule.write_text(minimal_rule(advice="reboot"), encoding="utf-8")
    with pytest.raises(RuleError) as caught:
        load([tmp_path], pipeline.fact_kinds())
    (problem,) = caught.value.problems
    assert problem.startswith(f"{rule}:5: ")
    assert all(kind in problem for kind in ADVICE_KINDS)
