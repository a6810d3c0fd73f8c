"""Shared paths and helpers. Tests run the real pipeline on real-format inputs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.gpu.loaders import load
from oomdoctor.report.build import build_report
from oomdoctor.rules.schema import Rule

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
RULES = REPO / "rules"
REAL_LOGS = REPO.parent / "shared" / "real-logs"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture(scope="session")
def rules() -> tuple[Rule, ...]:
    return pipeline.load_rules()


Diagnose = Callable[..., Diagnosis]


@pytest.fixture(scope="session")
def diagnose(rules: tuple[Rule, ...]) -> Diagnose:
    """Diagnose a log (optionally with GPU snapshot files), cached per input."""
    cache: dict[tuple[Path, tuple[Path, ...]], Diagnosis] = {}

    def run(path: Path, snapshots: tuple[Path, ...] = ()) -> Diagnosis:
        key = (path, tuple(snapshots))
        if key not in cache:
            gpu = load(list(snapshots)) if snapshots else None
            cache[key] = pipeline.run([str(path)], rules, gpu=gpu)
        return cache[key]

    return run


@pytest.fixture(scope="session")
def report_of(diagnose: Diagnose) -> Callable[..., dict[str, object]]:
    return lambda path, snapshots=(): build_report(diagnose(path, tuple(snapshots)))


def load_toml(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text("utf-8"))


def minimal_rule(
    advice: str = "none", fixtures: str = 'fire = ["a.log"]\nsilent = ["b.log"]'
) -> str:
    """The text of the smallest valid rule file (id "x"), with its advice kind and [fixtures]
    body replaceable: loader tests change one thing and expect one problem."""
    return (
        f'id = "x"\ncategory = "not_oom"\npriority = 1\ntitle = "x"\nadvice = "{advice}"\n'
        '[docs]\nwhat = "w"\nwhy = "w"\nremedy = "r"\nfalse_positives = ["f"]\n'
        'references = ["r"]\n[when]\nall = ["ready"]\n'
        f"[fixtures]\n{fixtures}\n"
    )


#: Every fixture log has a sidecar `NAME.expect.toml` beside it.
SIDECARS = sorted(FIXTURES.rglob("*.expect.toml"))


def fixture_log(sidecar: Path) -> Path:
    return sidecar.with_name(sidecar.name.replace(".expect.toml", ".log"))


def fixture_snapshots(sidecar: Path) -> tuple[Path, ...]:
    """The sidecar's `snapshot` key: a path or a list of paths, relative to the sidecar."""
    raw = load_toml(sidecar).get("snapshot", [])
    names = [raw] if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
    return tuple((sidecar.parent / n).resolve() for n in names)


def mem_fraction_directions(rep: dict[str, object]) -> list[str]:
    actions = rep["actions"]
    assert isinstance(actions, list)
    return [
        a["direction"]
        for a in actions
        if a["flag"] and a["direction"] and _is_fraction_flag(a["flag"])
    ]


#: The flags that size the server's memory share: SGLang's y, vLLM's u, an Omni stage's budget.
FRACTION_FLAGS = ("mem-fraction-static", "gpu-memory-utilization", "gpu-memory-fraction")


def _is_fraction_flag(flag: str) -> bool:
    return flag.replace("_", "-").endswith(FRACTION_FLAGS)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bless", action="store_true", help="rewrite golden files from current output"
    )
