"""The wheel carries the rules, their fixtures and the report templates: build it, install it into
a fresh virtual environment and diagnose from outside the source tree."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    wheel = next(dist.glob("oomdoctor-*.whl"))
    env = root / "venv"
    venv.create(env, with_pip=True)
    install = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    return env


def test_installed_wheel_diagnoses_a_fixture(installed: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    shutil.copy(FIXTURES / "sglang-0.5.2" / "worked-example-y070.log", log)
    exe = installed / "bin" / "oomdoctor"
    for fmt in ("json", "markdown", "text"):
        proc = subprocess.run(
            [str(exe), "diagnose", str(log), "--format", fmt],
            capture_output=True,
            text=True,
            cwd=tmp_path,  # away from the source tree: rules and templates must come from the wheel
            timeout=120,
        )
        assert proc.returncode == 1, proc.stderr
        if fmt == "json":
            rep = json.loads(proc.stdout)
            assert rep["verdict"]["category"] == "startup_kv_alloc"
            assert rep["budget"]["kv_gib"] == pytest.approx(-5.4, abs=0.005)
        elif fmt == "markdown":
            assert proc.stdout.startswith("## oomdoctor: startup\\_kv\\_alloc")


def test_installed_wheel_tests_its_own_rules(installed: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(installed / "bin" / "oomdoctor"), "rules", "test"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "0 failure(s)"
    assert sum(ln.startswith("ok ") for ln in lines) >= 20
