"""A wrapper does not change the verdict: every fixture log and every real log keeps its category
under every transform of ../shared/tools/mangle (a real log for two seeds: the first, and one of
the other two, chosen per log and transform so that both are run across the corpus; a fixture
for the first), and under the wrappers of tests/wrapper_transforms.py that mangle lacks (alone,
and two at once on the real logs) for the first seed. The seeds draw a pod name or a width;
every seed everywhere would double the run for little more, and this is most of CI's time.

The category compared is the one oomdoctor gives the log as it is (with the fixture's snapshots),
not its label: whether that is right is tests/test_real_logs.py's question. Each case writes the
transformed text to a file and runs the pipeline in-process; a seed that draws the same text as
an earlier one is not run again.

A category that changes for a reason that is not the wrapper (the transformed text reaches the
rules intact, but the judgement differs) is listed in ``NOT_THE_WRAPPER`` with its reason (none
today); a wrapper the reader does not take off yet, in ``WRAPPER_GAPS``. Both are explicit
xfails, strict, so that they flip loudly when fixed.
"""

from __future__ import annotations

import importlib.util
import random
import zlib
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from oomdoctor import pipeline
from oomdoctor.gpu.loaders import load
from oomdoctor.rules.schema import Rule
from tests.conftest import FIXTURES, REAL_LOGS, SIDECARS, fixture_log, fixture_snapshots
from tests.wrapper_transforms import COMBINATIONS, OWN

MANGLE = REAL_LOGS.parent / "tools" / "mangle"
SEEDS = (0, 1, 2)
#: (log name, transform) → why the category changes although the text reached the rules.
NOT_THE_WRAPPER: dict[tuple[str, str], str] = {}
#: (log name, transform) → the wrapper that is not taken off yet, and why. Known gaps of the
#: reader, listed so that fixing one flips its case.
WRAPPER_GAPS: dict[tuple[str, str], str] = {
    ("118.log", "compose+wrap"): "a one-line log in two lines: too few to learn a prefix or a "
    "width, and the cut (`failed:` / `CUDA out of memory.`) ends a phrase",
    ("sglang-0.5.10/gemma3-siglip-oom-kubectl.log", "compose+wrap"): "two prefixes (compose "
    "around kubectl's times) and a wrap that cuts right after them: the prefix is not learned, "
    "so what the wrap carried off the bare prefixes is not joined back",
    ("sglang-0.5.23/vlm-post-sizing-reserve.log", "compose+wrap"): "two prefixes (compose "
    "around kubectl's times) and a wrap that cuts right after them: the prefix is not learned, "
    "so what the wrap carried off the bare prefixes is not joined back",
}


def _mangle() -> ModuleType | None:
    if not MANGLE.is_file():
        return None
    loader = SourceFileLoader("mangle", str(MANGLE))
    spec = importlib.util.spec_from_loader("mangle", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


MANGLE_MODULE = _mangle()
#: Cases listed as known, which are run wherever they are (so that their xfails stay checked).
GAPS = {*NOT_THE_WRAPPER, *WRAPPER_GAPS}
Transform = Callable[[str, random.Random], str]


def _transforms() -> dict[str, tuple[Transform, ...]]:
    """Every transform by name (a combination's name joins its parts with `+`)."""
    known: dict[str, Transform] = dict(OWN)
    if MANGLE_MODULE is not None:
        known.update(MANGLE_MODULE.TRANSFORMS)
    names: dict[str, tuple[Transform, ...]] = {}
    for name, f in known.items():
        names[name] = (f,)
    for combo in COMBINATIONS:
        if all(part in known for part in combo):
            names["+".join(combo)] = tuple(known[part] for part in combo)
    return names


TRANSFORMS = _transforms()
MANGLE_NAMES = tuple(MANGLE_MODULE.TRANSFORMS) if MANGLE_MODULE is not None else ()


def _logs() -> list[tuple[str, Path, tuple[Path, ...]]]:
    out = [
        (str(fixture_log(s).relative_to(FIXTURES)), fixture_log(s), fixture_snapshots(s))
        for s in SIDECARS
    ]
    out += [(p.name, p, ()) for p in sorted(REAL_LOGS.glob("*.log"))]
    return out


LOGS = _logs()


def _cases() -> list[Any]:
    cases: list[Any] = []
    for name, path, snapshots in LOGS:
        for transform in TRANSFORMS:
            if "+" in transform and path.parent != REAL_LOGS and (name, transform) not in GAPS:
                continue  # two wrappers at once: on the real logs (a fixture is one of ours)
            marks = []
            why = NOT_THE_WRAPPER.get((name, transform))
            if why is not None:
                marks.append(pytest.mark.xfail(reason=f"not the wrapper: {why}", strict=True))
            gap = WRAPPER_GAPS.get((name, transform))
            if gap is not None:
                marks.append(pytest.mark.xfail(reason=f"wrapper not taken off: {gap}", strict=True))
            cases.append(
                pytest.param(path, snapshots, transform, id=f"{name}:{transform}", marks=marks)
            )
    return cases


@pytest.fixture(scope="module")
def category_of(rules: tuple[Rule, ...]) -> Callable[[Path, tuple[Path, ...]], str]:
    cache: dict[tuple[str, tuple[Path, ...]], str] = {}

    def run(path: Path, snapshots: tuple[Path, ...]) -> str:
        key = (path.read_text("utf-8", "surrogateescape"), snapshots)
        if key not in cache:
            gpu = load(list(snapshots)) if snapshots else None
            cache[key] = pipeline.run([str(path)], rules, gpu=gpu).verdict.category
        return cache[key]

    return run


def _seeds(path: Path, transform: str) -> tuple[int, ...]:
    """The first seed, and for mangle's transforms on a real log one of the others (the same
    every run); a fixture (a file of ours, one per family) gets the first seed only."""
    if transform not in MANGLE_NAMES or path.parent != REAL_LOGS:
        return SEEDS[:1]
    other = SEEDS[1 + zlib.crc32(f"{path.name}:{transform}".encode()) % (len(SEEDS) - 1)]
    return (SEEDS[0], other)


def _mangled(text: str, parts: tuple[Transform, ...], seed: int) -> str:
    rnd = random.Random(seed)  # as mangle's own mangle(): one generator through every part
    for part in parts:
        text = part(text, rnd)
    return text


@pytest.mark.skipif(MANGLE_MODULE is None, reason=f"{MANGLE} is not here")
@pytest.mark.skipif(not LOGS, reason="no logs")
@pytest.mark.parametrize(("path", "snapshots", "transform"), _cases())
def test_a_wrapper_keeps_the_category(
    path: Path,
    snapshots: tuple[Path, ...],
    transform: str,
    category_of: Callable[[Path, tuple[Path, ...]], str],
    tmp_path: Path,
) -> None:
    text = path.read_text("utf-8", "replace")
    base = category_of(path, snapshots)
    changed = []
    seen: set[str] = set()
    for seed in _seeds(path, transform):
        wrapped = _mangled(text, TRANSFORMS[transform], seed)
        if wrapped in seen:
            continue
        seen.add(wrapped)
        out = tmp_path / f"{path.stem}.{seed}.log"
        out.write_text(wrapped, "utf-8", newline="")
        got = category_of(out, snapshots)
        if got != base:
            changed.append(f"seed {seed}: {got}")
    assert not changed, f"{path.name} is {base}; under {transform}: {'; '.join(changed)}"


def test_the_real_logs_are_here() -> None:
    """The real logs are read in place; without them only the fixtures are run."""
    if not REAL_LOGS.is_dir():
        pytest.skip(f"{REAL_LOGS} is not here: only the fixtures were run")
    assert any(REAL_LOGS.glob("*.log"))


def test_the_listed_cases_exist() -> None:
    """An xfail whose log or transform was renamed would silently stop being checked."""
    names = {name for name, _, _ in LOGS}
    for log, transform in (*NOT_THE_WRAPPER, *WRAPPER_GAPS):
        assert transform in TRANSFORMS, transform
        assert log in names or not REAL_LOGS.is_dir(), log


def test_every_mangle_transform_is_run() -> None:
    """A transform mangle gains is run here too (the cases are built from its own table)."""
    if MANGLE_MODULE is None:
        pytest.skip(f"{MANGLE} is not here")
    assert set(MANGLE_NAMES) <= set(TRANSFORMS)
    assert len(TRANSFORMS) >= len(MANGLE_NAMES) + len(OWN)
