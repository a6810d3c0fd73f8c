"""Excerpt first: a fixture family is not done until what users paste of it gives the same verdict.

For every fixture whose log holds a traceback, three excerpts are diagnosed on their own:

- the suffix from its first traceback frame (the header and everything before it dropped);
- its last 12 lines;
- the PyTorch OOM message re-wrapped at 80 columns by hand (one break inside a word, one between a
  number and its unit), with the envelope only on the first piece.

Each must get the category of the whole log (its sidecar's `category`). What an excerpt must keep
for that is taken from the fixture's hand-written expectations, never from the code under test:
the `evidence = [...]` lines of the `[fixtures] fire` entries that name the fixture, in the rule
files whose category is the sidecar's (checked by `oomdoctor rules test`). An excerpt that cut at
least one of those lines from every such rule may lose the category, and is then skipped with the
lines named; one that kept all of some rule's lines, or a fixture no such rule names with
evidence, must keep the category.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oomdoctor import pipeline
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.gpu.loaders import load
from oomdoctor.report.build import build_report
from tests.conftest import FIXTURES, RULES, SIDECARS, fixture_snapshots, load_toml
from tests.conftest import fixture_log as _log

LAST_LINES = 12
WRAP = 80
_FRAME = re.compile(rb'File "[^"]+", line \d+, in ')


def _lines(path: Path) -> list[bytes]:
    """The log's lines as an editor numbers them (a tqdm `\r` does not end a line)."""
    return [line + b"\n" for line in path.read_bytes().split(b"\n")]


def _with_traceback(sidecar: Path) -> bool:
    log = _log(sidecar)
    return log.is_file() and _FRAME.search(log.read_bytes()) is not None


CASES = [s for s in SIDECARS if _with_traceback(s)]
IDS = [str(s.relative_to(FIXTURES)).replace(".expect.toml", "") for s in CASES]


@pytest.fixture(scope="module")
def run_excerpt(
    rules: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Path, list[bytes]], Diagnosis]:
    root = tmp_path_factory.mktemp("excerpts")
    counter = iter(range(1 << 30))

    def run(sidecar: Path, lines: list[bytes]) -> Diagnosis:
        path = root / f"excerpt-{next(counter)}.log"
        path.write_bytes(b"".join(lines))
        return pipeline.run([str(path)], rules, gpu=_gpu(sidecar))

    return run


def _gpu(sidecar: Path) -> Any:
    names = fixture_snapshots(sidecar)
    return load(list(names)) if names else None


def _hand_named_evidence() -> dict[tuple[Path, str], dict[str, frozenset[int]]]:
    """(fixture log, category) -> {rule id: the evidence lines its fire entry names by hand}."""
    named: dict[tuple[Path, str], dict[str, frozenset[int]]] = {}
    for path in sorted(RULES.glob("*.toml")):
        rule = load_toml(path)
        fixtures = rule.get("fixtures")
        for entry in fixtures.get("fire", []) if isinstance(fixtures, dict) else []:
            if not isinstance(entry, dict) or not entry.get("evidence"):
                continue
            key = ((path.parent / entry["log"]).resolve(), str(rule["category"]))
            lines = named.setdefault(key, {}).setdefault(str(rule["id"]), frozenset())
            named[key][str(rule["id"])] = lines | frozenset(entry["evidence"])
    return named


HAND_NAMED = _hand_named_evidence()


def _cut_evidence(sidecar: Path, window: set[int]) -> dict[str, list[int]]:
    """For each rule of the sidecar's category that names this fixture's evidence by hand, the
    named lines the excerpt cut; empty when no rule names any, or one rule lost none of its."""
    key = (_log(sidecar).resolve(), str(load_toml(sidecar)["category"]))
    cut = {rule: sorted(lines - window) for rule, lines in HAND_NAMED.get(key, {}).items()}
    return {} if any(not lost for lost in cut.values()) else cut


def _check(
    sidecar: Path,
    lines: list[bytes],
    first_line: int,
    run_excerpt: Callable[[Path, list[bytes]], Diagnosis],
) -> None:
    expected = load_toml(sidecar)["category"]
    cut = _cut_evidence(sidecar, set(range(first_line, first_line + len(lines))))
    got = run_excerpt(sidecar, lines).verdict
    if got.category != expected and cut:
        pytest.skip(f"the excerpt cuts hand-named evidence lines (rule: lines) {cut}")
    assert got.category == expected, f"{got.category} by {got.rule}: {got.summary}"


@pytest.mark.parametrize("sidecar", CASES, ids=IDS)
def test_headerless_traceback(
    sidecar: Path, run_excerpt: Callable[[Path, list[bytes]], Diagnosis]
) -> None:
    lines = _lines(_log(sidecar))
    first = next(i for i, line in enumerate(lines) if _FRAME.search(line))
    _check(sidecar, lines[first:], first + 1, run_excerpt)


@pytest.mark.parametrize("sidecar", CASES, ids=IDS)
def test_last_lines(sidecar: Path, run_excerpt: Callable[[Path, list[bytes]], Diagnosis]) -> None:
    lines = _lines(_log(sidecar))
    start = max(len(lines) - LAST_LINES, 0)
    _check(sidecar, lines[start:], start + 1, run_excerpt)


_MESSAGE = re.compile(r"(?:[\w.]*OutOfMemoryError: )?(?:CUDA|HIP) out of memory")


def rewrap(line: bytes, width: int = WRAP) -> list[bytes]:
    """The message of a line broken by hand into pieces of about ``width`` characters: mostly at
    spaces, once inside a word and once between a number and its unit. The envelope stays on the
    first piece; the continuation pieces carry nothing of it."""
    whole = line.decode("utf-8").rstrip("\r\n")
    m = _MESSAGE.search(whole)
    prefix, text = (whole[: m.start()], whole[m.start() :]) if m else ("", whole)
    pieces: list[str] = []
    inside_word = unit_split = False
    while len(text) > width:
        cut = text.rfind(" ", 0, width)
        unit = re.search(r"\d (?:GiB|MiB)", text[width // 2 : width])
        if not unit_split and unit:
            cut = width // 2 + unit.start() + 1
            unit_split = True
        elif not inside_word and cut > 10:
            cut -= 3  # three letters into the next word
            inside_word = True
        if cut <= 0:
            cut = width
        pieces.append(text[:cut].rstrip(" "))
        text = text[cut:].lstrip(" ")
    pieces.append(text)
    pieces[0] = prefix + pieces[0]
    return [p.encode() + b"\n" for p in pieces]


def _oom_message_lines(sidecar: Path) -> list[int]:
    """The 0-based indexes of the log's PyTorch OOM message lines that are too long for one
    80-column line (read from the log itself, not from the report)."""
    lines = _lines(_log(sidecar))
    return [
        i
        for i, line in enumerate(lines)
        if b"out of memory. Tried" in line and len(line.rstrip(b"\r\n")) > WRAP
    ]


#: Fixtures with a hand-checked [oom] table and an OOM message longer than 80 columns.
_OOM_CASES = [s for s in SIDECARS if "oom" in load_toml(s) and _oom_message_lines(s)]


@pytest.mark.parametrize(
    "sidecar", _OOM_CASES, ids=[str(s.relative_to(FIXTURES)) for s in _OOM_CASES]
)
def test_rewrapped_message(
    sidecar: Path,
    report_of: Callable[..., dict[str, Any]],
    run_excerpt: Callable[[Path, list[bytes]], Diagnosis],
) -> None:
    """The whole log with every long OOM message re-wrapped keeps the category, the numbers its
    sidecar's [oom] table gives, and the rest of the message's numbers as read unwrapped."""
    expect = load_toml(sidecar)
    hand: dict[str, Any] = expect["oom"]  # type: ignore[assignment]
    whole = report_of(_log(sidecar), fixture_snapshots(sidecar))
    wrapped: list[bytes] = []
    long_lines = set(_oom_message_lines(sidecar))
    for i, line in enumerate(_lines(_log(sidecar))):
        wrapped += rewrap(line) if i in long_lines else [line]
    rep = build_report(run_excerpt(sidecar, wrapped))
    assert rep["verdict"]["category"] == expect["category"], rep["verdict"]["summary"]
    oom = rep["failure"]["oom"]
    assert oom is not None, "the re-wrapped message is not read as an OOM message"
    for key in ("requested_gib", "free_gib", "total_gib", "this_process_gib"):
        if key in hand:
            assert oom[key] == pytest.approx(hand[key], abs=0.01), key
        else:
            assert oom[key] == whole["failure"]["oom"][key], key
