"""The distributions: build the sdist and, from it, the wheel (as `python -m build` does), check
what each carries, then install the wheel into a fresh virtual environment and diagnose from
outside the source tree.

The wheel carries the package, the rules and only the fixture files the built-in rules name (so
an installed `oomdoctor rules test` runs); the tests' oracles and model configs stay in the sdist.
With OOMDOCTOR_DIST_DIR set (CI does), the built sdist and wheel are copied there for
`twine check`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

from oomdoctor import __version__, pipeline
from oomdoctor.rules.loader import load
from tests.conftest import FIXTURES, REPO, RULES

DATA = "oomdoctor/_data"
DIST_INFO = f"oomdoctor-{__version__}.dist-info"
CACHES = {"__pycache__", ".venv", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), the wheel built from the unpacked sdist."""
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (sdist,) = out.glob("oomdoctor-*.tar.gz")
    (wheel,) = out.glob("oomdoctor-*.whl")
    keep = os.environ.get("OOMDOCTOR_DIST_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for artefact in (sdist, wheel):
            shutil.copy(artefact, keep)
    return sdist, wheel


@pytest.fixture(scope="module")
def wheel_names(dists: tuple[Path, Path]) -> set[str]:
    with zipfile.ZipFile(dists[1]) as whl:
        return set(whl.namelist())


@pytest.fixture(scope="module")
def sdist_names(dists: tuple[Path, Path]) -> set[str]:
    root = f"oomdoctor-{__version__}/"
    with tarfile.open(dists[0]) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    assert all(n.startswith(root) for n in names), names[:5]
    return {n[len(root) :] for n in names}


@pytest.fixture(scope="module")
def metadata(dists: tuple[Path, Path]) -> Message:
    with zipfile.ZipFile(dists[1]) as whl:
        return Parser().parsestr(whl.read(f"{DIST_INFO}/METADATA").decode("utf-8"))


def referenced_fixtures() -> set[str]:
    """Every file `rules test` of the built-in rules opens, relative to fixtures/."""
    refs: set[str] = set()
    for rule in load([RULES], pipeline.fact_kinds()):
        for fixture in (*rule.fire, *rule.silent):
            for path in (fixture.log, *fixture.snapshots):
                refs.add(path.relative_to(FIXTURES).as_posix())
    return refs


def test_wheel_carries_the_licence_and_py_typed(
    wheel_names: set[str], dists: tuple[Path, Path]
) -> None:
    licence = f"{DIST_INFO}/licenses/LICENSE"
    assert licence in wheel_names
    with zipfile.ZipFile(dists[1]) as whl:
        assert whl.read(licence) == (REPO / "LICENSE").read_bytes()
    assert "Apache License" in (REPO / "LICENSE").read_text("utf-8")
    assert "oomdoctor/py.typed" in wheel_names


def test_wheel_carries_the_code_and_the_rules(wheel_names: set[str]) -> None:
    code = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "oomdoctor").rglob("*")
        if p.is_file() and not CACHES & set(p.parts) and p.suffix != ".pyc"
    }
    assert code - wheel_names == set()
    rules = {f"{DATA}/rules/{p.name}" for p in RULES.glob("*.toml")}
    assert {n for n in wheel_names if n.startswith(f"{DATA}/rules/")} == rules
    assert len(rules) >= 20
    outside = {n for n in wheel_names if not n.startswith(("oomdoctor/", f"{DIST_INFO}/"))}
    assert outside == set()
    assert not [n for n in wheel_names if "__pycache__" in n or n.endswith(".pyc")]


def test_wheel_fixtures_are_exactly_those_the_rules_name(wheel_names: set[str]) -> None:
    shipped = {
        n[len(f"{DATA}/fixtures/") :] for n in wheel_names if n.startswith(f"{DATA}/fixtures/")
    }
    wanted = referenced_fixtures()
    assert any(w.startswith("snapshots/") for w in wanted)  # snapshots a rule reads do ship
    assert wanted - shipped == set(), "rules name fixtures the wheel lacks"
    assert shipped - wanted == set(), (
        "the wheel ships fixtures no rule reads: exclude them in "
        "[tool.hatch.build.targets.wheel] of pyproject.toml"
    )


def test_wheel_leaves_out_oracles_and_model_configs(wheel_names: set[str]) -> None:
    # The source tree has both, so these checks bite.
    assert list(FIXTURES.rglob("*.expect.toml"))
    assert list((FIXTURES / "configs").rglob("config.json"))
    assert not [n for n in wheel_names if n.endswith(".expect.toml")]
    assert not [n for n in wheel_names if f"{DATA}/fixtures/configs/" in n]
    assert not [n for n in wheel_names if n.endswith(("config.json", ".safetensors.index.json"))]


def test_wheel_metadata(metadata: Message) -> None:
    assert metadata["Name"] == "oomdoctor"
    assert metadata["Version"] == __version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    requires = metadata["Requires-Python"]
    assert requires.startswith(">=3.10")
    assert "<" not in requires
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert set(urls) >= {"Homepage", "Documentation", "Issues", "Source"}
    assert all(u.startswith("https://") for u in urls.values())
    classifiers = metadata.get_all("Classifier") or []
    for wanted in (
        "Development Status :: 4 - Beta",
        "Intended Audience :: Developers",
        "Operating System :: POSIX :: Linux",
        "Typing :: Typed",
    ):
        assert wanted in classifiers
    # PEP 639: the license expression supersedes license classifiers (PyPI refuses both).
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert metadata["Keywords"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    readme = (REPO / "README.md").read_text("utf-8")
    assert metadata.get_payload().strip() == readme.strip()


def test_sdist_carries_the_sources_and_no_caches(sdist_names: set[str]) -> None:
    for name in ("LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "bench/gen_log.py"):
        assert name in sdist_names
    tops = {n.split("/", 1)[0] for n in sdist_names}
    assert tops >= {"oomdoctor", "rules", "fixtures", "tests", "docs", "bench"}
    # The tests need their oracles and model configs: the sdist keeps what the wheel leaves out.
    assert any(n.endswith(".expect.toml") for n in sdist_names)
    assert any(n.startswith("fixtures/configs/") for n in sdist_names)
    assert not [n for n in sdist_names if CACHES & set(n.split("/")) or n.endswith(".pyc")]
    assert not [n for n in sdist_names if n.startswith("bench/out/")]


@pytest.fixture(scope="module")
def installed(dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("wheel") / "venv"
    venv.create(env, with_pip=True)
    install = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(dists[1])],
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
            assert proc.stdout.startswith("## oomdoctor: `startup_kv_alloc`")


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
