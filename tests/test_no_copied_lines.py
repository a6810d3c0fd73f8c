"""No file under tests/ or fixtures/ carries a line copied from the real logs (../shared/real-logs).

Those logs are held-out evidence: a fixture or a unit test written from one of them would teach
the tool that log rather than its family. Inputs are written from the emitting projects'
templates (../shared/reference/*.md) with values of their own.

A line counts as copied when it shares with a real-log line a stretch of 60 or more characters
that starts at a word boundary in both, and that stretch

- carries the log's own specifics: a time of day, a pid, a memory figure with a unit, or a number
  of six or more digits (byte counts, addresses); the templates' fixed wording alone is shared by
  every log of a family and is no copy;
- is not text of the reference templates themselves (their examples may be quoted).

Python files are read as their string constants (implicit concatenations joined, so a line split
across source lines is still seen whole) as well as their source lines.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REAL_LOGS, REPO

MIN = 60
REFERENCE = REAL_LOGS.parent / "reference"
#: The specifics of one log: a time of day, a pid, a memory figure, a long number, an address.
SPECIFIC = re.compile(
    r"\d\d:\d\d:\d\d|\bpid[=:]\s*\d+|\bPID:\d+|\bProcess \d+|\d+\.\d+ ?(?:GiB|MiB|GB|MB|KiB)\b"
    r"|\d{6,}|0x[0-9a-fA-F]{6,}"
)
#: Where a stretch may start: the line's start or after a space, bracket, colon or comma.
_BOUNDARY = re.compile(r"(?<=[\s\]\)>|:,])(?=\S)")
_TEXT_SUFFIXES = {".log", ".txt", ".md", ".json", ".out", ".toml", ".py", ".xml", ".csv", ".jsonl"}

pytestmark = pytest.mark.skipif(
    not REAL_LOGS.is_dir(), reason=f"the shared real logs are not here ({REAL_LOGS})"
)


def _starts(line: str) -> Iterator[int]:
    """Where a stretch of MIN characters may start: at a word boundary, MIN before the end."""
    for start in (0, *(m.start() for m in _BOUNDARY.finditer(line))):
        if len(line) - start < MIN:
            return
        yield start


class RealLines:
    """The real-log lines, indexed by the MIN characters after each word boundary."""

    def __init__(self) -> None:
        self.reference = " ".join(
            " ".join(p.read_text("utf-8", errors="replace").split())
            for p in sorted(REFERENCE.glob("*.md"))
        )
        self.index: dict[str, list[tuple[str, int, str]]] = {}
        for log in sorted(REAL_LOGS.glob("*.log")):
            text = log.read_text("utf-8", errors="replace")
            for number, raw in enumerate(text.splitlines(), 1):
                line = raw.strip()
                for start in _starts(line):
                    key = line[start : start + MIN]
                    self.index.setdefault(key, []).append((line, start, f"{log.name}:{number}"))

    def copied(self, line: str) -> tuple[str, str] | None:
        """The longest stretch of ``line`` copied from a real log with its specifics, and where
        it is; None when there is none."""
        best: tuple[str, str] | None = None
        for start in _starts(line):
            for real, at, where in self.index.get(line[start : start + MIN], ()):
                length = MIN
                while (
                    start + length < len(line)
                    and at + length < len(real)
                    and line[start + length] == real[at + length]
                ):
                    length += 1
                stretch = line[start : start + length]
                if not SPECIFIC.search(stretch) or " ".join(stretch.split()) in self.reference:
                    continue
                if best is None or len(stretch) > len(best[0]):
                    best = (stretch, where)
        return best


def _lines_of(path: Path) -> Iterator[str]:
    text = path.read_text("utf-8", errors="replace")
    lines = text.splitlines()
    if path.suffix == ".py":
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                lines += node.value.splitlines()
    for line in lines:
        stripped = line.strip().strip("\"'").strip()
        if len(stripped) >= MIN:
            yield stripped


def _checked_files() -> list[Path]:
    files = [*(REPO / "tests").rglob("*"), *FIXTURES.rglob("*")]
    return sorted(
        p
        for p in files
        if p.is_file() and p.suffix in _TEXT_SUFFIXES and "__pycache__" not in p.parts
    )


def copied_lines(files: list[Path], real: RealLines) -> list[str]:
    """`file: the copied stretch (where it is in the real logs)` for each offending line."""
    out = []
    for path in files:
        for line in _lines_of(path):
            hit = real.copied(line)
            if hit is not None:
                name = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                out.append(f"{name}: {hit[0][:120]!r} ({hit[1]})")
    return out


@pytest.fixture(scope="module")
def real() -> RealLines:
    return RealLines()


def test_no_file_copies_a_real_log_line(real: RealLines) -> None:
    offenders = copied_lines(_checked_files(), real)
    assert not offenders, "lines copied from ../shared/real-logs:\n" + "\n".join(offenders)


def test_the_check_finds_a_copied_line(real: RealLines, tmp_path: Path) -> None:
    """The check has teeth: a real-log line with its specifics, cut short and pasted into a test
    file under another envelope, is found; the same template with values of its own is not."""
    line = max(
        (entries[0][0] for entries in real.index.values() if SPECIFIC.search(entries[0][0])),
        key=len,
    )
    pasted = tmp_path / "test_pasted.py"
    pasted.write_text(f"LINE = ({('[12:00:00 TP0] ' + line[:-5])!r})\n", "utf-8")
    assert copied_lines([pasted], real) != []
    fresh = tmp_path / "fresh.log"
    fresh.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.77 GiB. GPU 0 has a "
        "total capacity of 77.77 GiB of which 7.07 GiB is free.\n",
        "utf-8",
    )
    assert copied_lines([fresh], real) == []
