"""User rules (issue 22 item 6): fixtures confined to the rule's directory, and a verdict decided
by a --rules rule says so in every report format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES, REPO

Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"


def _rule(directory: Path, rid: str, fixtures: str, priority: int | None = None) -> Path:
    text = (REPO / "rules" / "gpu-fault.toml").read_text()
    text = text.replace('id = "gpu-fault"', f'id = "{rid}"')
    text = text[: text.index("[fixtures]")] + "[fixtures]\n" + fixtures + "\n"
    if priority is not None:
        lines = [
            f"priority = {priority}" if ln.startswith("priority =") else ln
            for ln in text.splitlines()
        ]
        text = "\n".join(lines) + "\n"
    path = directory / f"{rid}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "fixtures",
    [
        'fire = ["../../etc/passwd"]\nsilent = ["ok.log"]',
        'fire = ["ok.log"]\nsilent = ["/proc/self/environ"]',
        'fire = ["ok.log"]\nsilent = [{ log = "ok.log", snapshot = ["../../etc/hostname"] }]',
        'fire = ["link.log"]\nsilent = ["ok.log"]',
    ],
)
def test_fixtures_outside_the_rule_directory_are_refused(tmp_path: Path, fixtures: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "ok.log").write_text("nothing here\n")
    (rules / "link.log").symlink_to("/etc/passwd")  # inside by name, outside once followed
    _rule(rules, "peek", fixtures)
    result = CliRunner().invoke(cli, ["rules", "test", str(rules)])
    assert result.exit_code == 1
    assert "lies outside the rule's directory; refused" in result.stdout + result.stderr
    assert "root:" not in result.stdout + result.stderr


def test_fixtures_inside_the_rule_directory_are_read(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    (rules / "logs").mkdir(parents=True)
    (rules / "logs" / "quiet.log").write_text("nothing here\n")
    _rule(rules, "inside", 'fire = ["logs/quiet.log"]\nsilent = ["logs/quiet.log"]')
    result = CliRunner().invoke(cli, ["rules", "test", str(rules)])
    out = result.stdout + result.stderr
    assert "outside the rule's directory" not in out
    assert "did not fire" in out  # it was opened and diagnosed


GPU_FAULT = FIXTURES / "sglang-0.5.23" / "illegal-memory-access.log"


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_a_verdict_from_a_user_rule_says_so_in_every_format(tmp_path: Path, fmt: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    path = _rule(rules, "my-fault", 'fire = ["x.log"]\nsilent = ["x.log"]', priority=999)
    result = CliRunner().invoke(
        cli, ["diagnose", str(GPU_FAULT), "--no-gpu", "--format", fmt, "--rules", str(rules)]
    )
    # wrapped text; Markdown's escapes and code spans
    shown = " ".join(result.stdout.replace("\\", "").replace("`", "").split())
    assert f"[user rule my-fault, from --rules {path}]" in shown
    if fmt == "json":
        verdict = json.loads(result.stdout)["verdict"]
        assert verdict["rule"] == "my-fault"
        assert verdict["rule_source"] == str(path)


def test_a_shipped_verdict_has_no_user_mark() -> None:
    result = CliRunner().invoke(cli, ["diagnose", str(GPU_FAULT), "--no-gpu", "--format", "json"])
    verdict = json.loads(result.stdout)["verdict"]
    assert "rule_source" not in verdict
    assert "user rule" not in verdict["summary"]
