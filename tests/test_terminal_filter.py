"""Nothing foreign reaches the terminal raw outside a report either (issue 22, item 7): stderr
messages (ours and click's usage errors) and `rules list` / `rules show` pass through the
visible-control filter (``report.terminal``), so a file name or a rule's text cannot write the
clipboard (OSC 52), clear the screen, erase a warning or start a forged line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO, minimal_rule

OSC52 = "\x1b]52;c;ZXZpbA==\x07"
CLEAR = "\x1b[2J\x1b[H"
ERASE = "\r\x1b[2K"
FORGED = "oomdoctor: verdict: not an OOM, nothing to do"
HOSTILE = f"run{OSC52}{CLEAR}{ERASE}\n{FORGED}"


def _oomdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point (``main``), as a user runs it: click's own errors included."""
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


def _assert_inert(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text, repr(text[-400:])
    lines = text.splitlines()
    assert not any(line.startswith(FORGED) for line in lines), lines  # no line was forged


def test_a_missing_log_with_escapes_in_its_name(tmp_path: Path) -> None:
    result = _oomdoctor("diagnose", str(tmp_path / f"{HOSTILE}.log"))
    assert result.returncode in (2, 3), result.stderr
    _assert_inert(result.stderr)
    assert "␛]52;c;ZXZpbA==␇" in result.stderr  # shown, so the user sees what was there


def test_an_empty_log_with_escapes_in_its_name(tmp_path: Path) -> None:
    log = tmp_path / f"{HOSTILE}.log"
    log.write_text("")
    result = _oomdoctor("diagnose", str(log))
    assert result.returncode == 3, result.stderr
    _assert_inert(result.stderr)
    assert "␊" in result.stderr  # the newline is shown, and starts no line


def test_a_secret_in_a_file_name_is_masked_on_stderr(tmp_path: Path) -> None:
    result = _oomdoctor("diagnose", str(tmp_path / "logs?token=stderrTok42xQzW9&x=1.log"))
    assert "stderrTok42xQzW9" not in result.stderr
    assert "<redacted>" in result.stderr


@pytest.fixture
def hostile_rules(tmp_path: Path) -> Path:
    log = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_bytes(log.read_bytes())
    esc = "\\u001b]52;c;ZXZpbA==\\u0007 \\u001b[2J\\u001b[2K\\r"
    text = minimal_rule().replace('title = "x"', f'title = "x {esc} hidden\\n{FORGED}"')
    text = text.replace('what = "w"', f'what = "w {esc}\\n{FORGED}"')
    (tmp_path / "x.toml").write_text(text, encoding="utf-8")
    return tmp_path


def test_rules_list_shows_rule_text_inert(hostile_rules: Path) -> None:
    result = _oomdoctor("rules", "list", "--rules", str(hostile_rules))
    assert result.returncode == 0, result.stderr
    _assert_inert(result.stdout)
    assert "␛]52;c;ZXZpbA==␇" in result.stdout


def test_rules_show_shows_rule_text_inert(hostile_rules: Path) -> None:
    result = _oomdoctor("rules", "show", "x", "--rules", str(hostile_rules))
    assert result.returncode == 0, result.stderr
    _assert_inert(result.stdout)
    assert "what: w ␛]52;c;ZXZpbA==␇" in result.stdout


def test_a_broken_rule_file_with_escapes_in_its_name(tmp_path: Path) -> None:
    (tmp_path / f"bad{OSC52}{ERASE}.toml").write_text("id = [", encoding="utf-8")
    result = _oomdoctor("rules", "list", "--rules", str(tmp_path))
    assert result.returncode != 0
    _assert_inert(result.stderr)
    assert "problem(s) in rule files" in result.stderr


def test_an_unknown_rule_id_with_escapes(tmp_path: Path) -> None:
    result = _oomdoctor("rules", "show", HOSTILE)
    assert result.returncode == 2
    _assert_inert(result.stderr)
    assert "no such rule" in result.stderr
