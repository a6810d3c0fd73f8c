"""Hostile input: random bytes, shuffled real lines, every truncation of a fixture, giant lines,
broken pipes and bugs. The tool always ends with a verdict or a one-line error, never a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor import pipeline
from oomdoctor.cli import cli
from oomdoctor.model import CATEGORIES
from oomdoctor.report.build import build_report
from tests.conftest import FIXTURES, REAL_LOGS, REPO

RULES = pipeline.load_rules()
REAL_LINES = [
    line
    for p in [*sorted(FIXTURES.rglob("*.log")), *sorted(REAL_LOGS.glob("*.log"))]
    for line in p.read_bytes().splitlines(keepends=True)
]


def _diagnose(data: bytes) -> dict:
    """The whole pipeline on raw bytes, as `diagnose -` would see them."""
    diag = pipeline.run(["-"], RULES, stdin=io.BytesIO(data))
    rep = build_report(diag)
    assert rep["verdict"]["category"] in CATEGORIES
    json.dumps(rep)  # always serialisable
    return rep


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=20_000))
def test_random_bytes(data: bytes) -> None:
    _diagnose(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(REAL_LINES), max_size=120), st.binary(max_size=64))
def test_random_mixtures_of_real_lines(lines: list[bytes], junk: bytes) -> None:
    _diagnose(b"".join(lines) + junk)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=40), st.integers(1, 5000))
def test_giant_lines_among_real_ones(lines: list[bytes], width: int) -> None:
    giant = (b"x" * width + b"CUDA out of memory" + b"y" * width) * 50
    _diagnose(giant + b"\n" + b"".join(lines) + giant)


def test_every_truncation_of_a_fixture() -> None:
    data = (FIXTURES / "sglang-0.3.6" / "startup-kv-dp-1.log").read_bytes()
    categories = set()
    for cut in range(len(data) + 1):
        categories.add(_diagnose(data[:cut])["verdict"]["category"])
    assert categories >= {"unknown", "startup_kv_alloc"}  # the verdict appears once the error does


def test_a_200_mb_single_line(tmp_path: Path) -> None:
    big = tmp_path / "one-line.log"
    with big.open("wb") as fh:
        chunk = b"a" * (1 << 20)
        for _ in range(200):
            fh.write(chunk)
    result = CliRunner().invoke(cli, ["diagnose", str(big), "--format", "json", "--no-gpu"])
    assert result.exit_code == 0
    rep = json.loads(result.stdout)
    assert rep["input"]["lines_read"] == 1
    assert any("longer than 1 MiB were cut" in n for n in rep["notices"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path: Path) -> None:
    locked = tmp_path / "locked.log"
    locked.write_text("x\n")
    locked.chmod(0)
    result = CliRunner().invoke(cli, ["diagnose", str(locked)])
    assert result.exit_code == 3 and "permission denied" in result.stderr


def test_broken_pipe_is_quiet(tmp_path: Path) -> None:
    log = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"
    proc = subprocess.run(
        f"{sys.executable} -m oomdoctor diagnose {log} --no-gpu | head -1",
        shell=True,
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.stdout.count(b"\n") == 1
    assert b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr


def test_internal_error_is_short_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("planted bug")

    monkeypatch.setattr(pipeline, "run", boom)
    log = str(FIXTURES / "sglang-0.5.2" / "worked-example-y085.log")
    monkeypatch.setattr(sys, "argv", ["oomdoctor", "diagnose", log, "--no-gpu"])
    from oomdoctor.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 70
    monkeypatch.setattr(sys, "argv", ["oomdoctor", "--debug", "diagnose", log, "--no-gpu"])
    with pytest.raises(ZeroDivisionError):
        main()


def test_internal_error_message(tmp_path: Path) -> None:
    """Through a real process: one line naming the version, a hint, no traceback."""
    code = (
        "import sys; from oomdoctor import pipeline; from oomdoctor.cli import main\n"
        "def boom(*a, **k): raise ZeroDivisionError('planted bug')\n"
        "pipeline.run = boom\n"
        f"sys.argv = ['oomdoctor', 'diagnose', {str(FIXTURES / 'sglang-0.5.2' / 'worked-example-y085.log')!r}, '--no-gpu']\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 70
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(
        "oomdoctor: internal error: ZeroDivisionError: planted bug (oomdoctor "
    )
    assert lines[1].startswith("hint: rerun with --debug")
    assert "Traceback" not in proc.stderr


def test_rule_file_problems_are_all_listed(tmp_path: Path) -> None:
    good = (REPO / "rules" / "gpu-fault.toml").read_text()
    (tmp_path / "dup.toml").write_text(good)  # duplicate id of a built-in rule
    (tmp_path / "regex.toml").write_text(
        good.replace('id = "gpu-fault"', 'id = "bad-regex"')
        + '\n[[patterns]]\nname = "x"\nanchor = "abc"\nregex = "abc("\n'
    )
    (tmp_path / "missing.toml").write_text('id = "missing-fields"\n')
    result = CliRunner().invoke(cli, ["rules", "list", "--rules", str(tmp_path)])
    assert result.exit_code == 3
    err = result.stderr
    assert f'{tmp_path / "dup.toml"}:1: duplicate rule id "gpu-fault"' in err
    assert f"{tmp_path / 'regex.toml'}:" in err and "invalid regex" in err
    assert err.count(f"{tmp_path / 'missing.toml'}:") >= 5  # every missing field, each with a line
    assert "Traceback" not in err
