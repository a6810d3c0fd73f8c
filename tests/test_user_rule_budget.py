"""User patterns under one time budget per run (issue 22 item 6): thirty slow rules share one
budget instead of taking one each, and a user's actor regex that backtracks exponentially is cut
off by the regex module's timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES, REPO

Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"
SLOW = '\n[[patterns]]\nname = "slow"\nanchor = "slowpat"\nregex = "slowpat x(a|aa)+b"\n'


def _rule(directory: Path, rid: str, extra: str = "") -> Path:
    text = (REPO / "rules" / "gpu-fault.toml").read_text()
    text = text.replace('id = "gpu-fault"', f'id = "{rid}"')
    # fixtures are confined to the rule directory: these rules are never self-tested here
    text = text[: text.index("[fixtures]")] + '[fixtures]\nfire = ["f.log"]\nsilent = ["f.log"]\n'
    path = directory / f"{rid}.toml"
    path.write_text(text + extra)
    return path


def _diagnose(log: Path, rules: Path) -> tuple[int, dict, float]:
    start = time.monotonic()
    result = CliRunner().invoke(
        cli, ["diagnose", str(log), "--no-gpu", "--format", "json", "--rules", str(rules)]
    )
    return result.exit_code, json.loads(result.stdout), time.monotonic() - start


def test_thirty_slow_rules_share_one_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pattern costs about 1.5 ms a line on 400 lines (0.6 s): under a per-pattern budget
    of 0.4 s thirty of them took 30 × 0.4 s = 12 s; under one budget the run spends 0.4 s."""
    from oomdoctor.rules import schema

    monkeypatch.setattr(schema, "PATTERN_BUDGET", 0.4)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "f.log").write_text("x\n")
    for n in range(30):
        _rule(rules, f"slow-{n:02d}", SLOW)
    log = tmp_path / "slow.log"
    slow = b"[2025-09-22 08:40:00] slowpat x" + b"a" * 16 + b"\n"
    log.write_bytes(Y085.read_bytes() + slow * 400)
    code, rep, elapsed = _diagnose(log, rules)
    assert code == 1
    [notice] = [n for n in rep["notices"] if "time budget" in n]
    assert "together they used up their 0.4 s time budget" in notice
    assert elapsed < 8, elapsed


def test_an_exponential_actor_regex_is_cut_off(tmp_path: Path) -> None:
    """`^(a|aa)+$` on a 40-character name that does not match backtracks about 1.6^40 times:
    with no timeout it ran for hours; the regex module's timeout stops it."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "engine-markers.toml").write_text(
        '[[marker]]\nengine = "sglang"\nwhere = "actor"\nmatch = "^(a|aa)+$"\n'
    )
    log = tmp_path / "actor.log"
    name = "a" * 40 + "b"
    line = f"({name} pid=4242) ERROR torch.OutOfMemoryError: CUDA out of memory.\n"
    log.write_bytes(Y085.read_bytes() + line.encode() * 3)
    code, rep, elapsed = _diagnose(log, rules)
    assert code == 1
    assert elapsed < 20, elapsed
    assert any("actor regex '^(a|aa)+$' timed out on the name" in n for n in rep["notices"])


def test_a_user_actor_regex_still_matches(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "engine-markers.toml").write_text(
        '[[marker]]\nengine = "vllm"\nwhere = "actor"\nmatch = "^MyWorker\\\\d+$"\nstrength = 9\n'
    )
    log = tmp_path / "actor.log"
    log.write_bytes(b"(MyWorker3 pid=4242) ERROR torch.OutOfMemoryError: CUDA out of memory.\n")
    _, rep, _ = _diagnose(log, rules)
    assert rep["input"]["engine"] == "vllm"
    assert rep["input"]["engine_evidence"] == "the process name MyWorker3 (line 1)"
    assert not any("timed out" in n for n in rep["notices"])
