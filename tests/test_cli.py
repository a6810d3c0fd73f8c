"""The command line: exit codes and stderr together, every input path, rules commands."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES, REPO

Y070 = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"


def run(*args: str, input: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


def test_worked_example_numbers_in_json() -> None:
    """DESIGN §2: −5.4 GiB of KV at y 0.70, 6.3 GiB at y 0.85 (pre 78, weights 60)."""
    code, out, _ = run("diagnose", str(Y070), "--format", "json")
    rep = json.loads(out)
    assert code == 1
    assert rep["budget"]["kv_gib"] == pytest.approx(-5.4, abs=0.005)
    assert rep["budget"]["y_zero"] == pytest.approx(1 - 18 / 78, abs=1e-4)
    raise_to = next(a for a in rep["actions"] if a["flag"] == "--mem-fraction-static")
    assert raise_to["direction"] == "raise"
    assert rep["budget"]["y_min"] <= raise_to["value"] <= rep["budget"]["y_max"]
    code, out, _ = run("diagnose", str(Y085), "--format", "json")
    rep = json.loads(out)
    assert rep["budget"]["kv_gib"] == pytest.approx(6.3, abs=0.005)
    lower_to = next(a for a in rep["actions"] if a["flag"] == "--mem-fraction-static")
    assert lower_to["direction"] == "lower" and lower_to["value"] < 0.85
    assert lower_to["value"] >= rep["budget"]["y_min"]


def test_runtime_lowering_follows_the_formula() -> None:
    """new y ≤ y − (A − F + margin)/pre, never below the y that keeps KV positive."""
    rep = json.loads(run("diagnose", str(Y085), "--format", "json")[1])
    oom = rep["failure"]["oom"]
    b = rep["budget"]
    short = oom["requested_gib"] - oom["free_gib"]
    margin = max(1.0, 0.10 * b["dynamic_gib"])
    bound = b["mem_fraction_static"] - (short + margin) / b["pre_gib"]
    value = next(a["value"] for a in rep["actions"] if a["flag"] == "--mem-fraction-static")
    assert value <= bound + 1e-9
    assert value > bound - 0.01  # rounded down to the next 0.01, not further
    assert value > b["y_zero"]


def test_exit_codes() -> None:
    assert run("diagnose", str(Y070))[0] == 1
    assert run("diagnose", str(Y070), "--exit-zero")[0] == 0
    healthy = FIXTURES / "sglang-0.5.10" / "retraction-only.log"
    if healthy.is_file():
        assert run("diagnose", str(healthy))[0] == 0


def test_missing_file_is_a_one_line_error() -> None:
    code, out, err = run("diagnose", "/nonexistent/server.log")
    assert code == 3
    assert out == ""
    assert err.splitlines()[0] == "oomdoctor: /nonexistent/server.log: no such file"
    assert "Traceback" not in err


def test_directory_is_an_error(tmp_path: Path) -> None:
    code, _, err = run("diagnose", str(tmp_path))
    assert code == 3 and "is a directory" in err


def test_unknown_format_is_usage_error() -> None:
    code, _, err = run("diagnose", str(Y070), "--format", "yaml")
    assert code == 2 and "yaml" in err


def test_stdin_pipe() -> None:
    code, out, _ = run("diagnose", "-", "--format", "json", input=Y070.read_bytes())
    assert code == 1
    rep = json.loads(out)
    assert rep["verdict"]["category"] == "startup_kv_alloc"
    assert rep["input"]["sources"] == ["<stdin>"]


def test_gzip_and_output_file(tmp_path: Path) -> None:
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(Y070.read_bytes()))
    target = tmp_path / "report.md"
    code, out, _ = run("diagnose", str(gz), "--format", "markdown", "-o", str(target))
    assert code == 1 and out == ""
    assert "`startup_kv_alloc`" in target.read_text()


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    data = gzip.compress(Y070.read_bytes())
    gz = tmp_path / "cut.log.gz"
    gz.write_bytes(data[: len(data) * 9 // 10])
    _code, out, _ = run("diagnose", str(gz), "--format", "json")
    rep = json.loads(out)
    assert any("truncated" in n for n in rep["notices"])
    assert rep["budget"]["pre_gib"] == 78.0  # the part that was read was used


def test_several_files_are_one_incident(tmp_path: Path) -> None:
    lines = Y070.read_text().splitlines(keepends=True)
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("".join(lines[:30]))
    b.write_text("".join(lines[30:]))
    rep = json.loads(run("diagnose", str(a), str(b), "--format", "json")[1])
    assert rep["verdict"]["category"] == "startup_kv_alloc"
    assert rep["budget"]["kv_gib"] == pytest.approx(-5.4, abs=0.005)
    assert rep["input"]["sources"] == [str(a), str(b)]


def test_tty_stdin_without_log_prints_usage() -> None:
    leader, follower = os.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "oomdoctor", "diagnose"],
            stdin=follower,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 2
    assert "no input" in proc.stderr and "hint:" in proc.stderr


def test_help_imports_neither_jinja2_nor_pynvml() -> None:
    probe = (
        "import sys\n"
        "from oomdoctor.cli import main\n"
        "sys.argv = ['oomdoctor', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('jinja2', 'pynvml', 'rich', 'regex') if m in sys.modules]\n"
        "sys.stderr.write(repr(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "[]"
    assert "diagnose" in proc.stdout


def test_json_diagnose_does_not_import_jinja2_or_pynvml() -> None:
    probe = (
        "import sys\n"
        "from oomdoctor.cli import main\n"
        f"sys.argv = ['oomdoctor', 'diagnose', {str(Y070)!r}, '--format', 'json', '--no-gpu']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(repr([m for m in ('jinja2', 'pynvml') if m in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.stderr.strip() == "[]"


def test_python_dash_m() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "oomdoctor" in proc.stdout


def test_rules_list_show_features() -> None:
    code, out, _ = run("rules", "list")
    assert code == 0 and "startup-kv-no-room" in out
    code, out, _ = run("rules", "show", "startup-kv-no-room")
    assert code == 0 and "false positives:" in out and "fires on:" in out
    code, _, err = run("rules", "show", "no-such-rule")
    assert code == 2 and 'no such rule: "no-such-rule"' in err
    code, out, _ = run("rules", "features")
    assert code == 0 and "oom.foreign_explains" in out


def test_bad_rule_files_list_every_problem(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('id = "Bad Id"\ncategory = "nope"\npatern = "x"\n')
    (tmp_path / "b.toml").write_text("id = [\n")
    code, out, err = run("diagnose", str(Y070), "--rules", str(tmp_path))
    assert code == 3 and out == ""
    lines = err.splitlines()
    assert any(
        ln.startswith(f"oomdoctor: {tmp_path / 'a.toml'}:1: ") and "id" in ln for ln in lines
    )
    assert any(f"{tmp_path / 'a.toml'}:2: " in ln and "category" in ln for ln in lines)
    assert any(f"{tmp_path / 'a.toml'}:3: " in ln and 'unknown key "patern"' in ln for ln in lines)
    assert any(f"{tmp_path / 'b.toml'}:" in ln and "invalid TOML" in ln for ln in lines)
    assert any(ln.startswith("hint:") for ln in lines)
    assert "Traceback" not in err


USER_RULE = """
id = "nccl-cuda-failure"
category = "runtime_activation"
priority = 99
confidence = 0.6
title = "NCCL could not allocate its buffers"
advice = "lower_mem_fraction"

[docs]
what = "NCCL's own CUDA allocation failed."
why = "NCCL buffers come from the dynamic share."
remedy = "Lower the fraction."
false_positives = ["none known"]
references = ["https://docs.nvidia.com/deeplearning/nccl/"]

[[patterns]]
name = "nccl"
anchor = "NCCL WARN"
regex = "NCCL WARN .*Cuda failure (?P<code>\\\\d+)"

[when]
all = ["pattern.nccl-cuda-failure.nccl"]

[fixtures]
fire = [{ log = "nccl.log", evidence = [1] }]
silent = ["quiet.log"]
"""


def test_user_rule_adds_a_pattern_without_code(tmp_path: Path) -> None:
    (tmp_path / "nccl.toml").write_text(USER_RULE)
    (tmp_path / "nccl.log").write_text(
        "[2025-01-01 00:00:00 TP1] gpu-7:1234:1234 [1] NCCL WARN Cuda failure 2 'out of memory'\n"
    )
    (tmp_path / "quiet.log").write_text("[2025-01-01 00:00:00 TP1] Decode batch. #running-req: 1\n")
    code, out, _ = run(
        "diagnose", str(tmp_path / "nccl.log"), "--rules", str(tmp_path), "--format", "json"
    )
    rep = json.loads(out)
    assert rep["verdict"]["rule"] == "nccl-cuda-failure"
    assert rep["findings"][0]["evidence"][0]["line"] == 1
    code, out, _ = run("rules", "test", str(tmp_path))
    assert code == 0, out
    assert "ok   nccl-cuda-failure" in out


def test_rules_test_reports_a_failing_fixture(tmp_path: Path) -> None:
    (tmp_path / "nccl.toml").write_text(
        USER_RULE.replace('fire = [{ log = "nccl.log", evidence = [1] }]', 'fire = ["quiet.log"]')
    )
    (tmp_path / "quiet.log").write_text("nothing here\n")
    code, out, _ = run("rules", "test", str(tmp_path))
    assert code == 1 and "FAIL nccl-cuda-failure" in out and "did not fire" in out


def test_catastrophic_user_pattern_does_not_hang(tmp_path: Path) -> None:
    """`(a+)+$` is handled by the regex engine; a pattern that does backtrack is cut off by the
    per-line timeout and disabled for the run, with a notice naming it."""
    line = "NCCL WARN " + "a" * 40 + "!\n"
    (tmp_path / "nccl.log").write_text(line * 50)
    (tmp_path / "quiet.log").write_text("x\n")
    for pattern, disabled in (("NCCL WARN (a+)+$", False), ("NCCL WARN (a|aa)+$", True)):
        rule = USER_RULE.replace(
            'regex = "NCCL WARN .*Cuda failure (?P<code>\\\\d+)"', f'regex = "{pattern}"'
        )
        (tmp_path / "slow.toml").write_text(rule)
        _code, out, _ = run(
            "diagnose", str(tmp_path / "nccl.log"), "--rules", str(tmp_path), "--format", "json"
        )
        notices = json.loads(out)["notices"]
        assert any("nccl-cuda-failure.nccl was disabled" in n for n in notices) == disabled


def test_readme_commands_exist() -> None:
    readme = (REPO / "README.md").read_text()
    assert "oomdoctor diagnose" in readme
