"""Knowledge as data: engine markers (the TOML table beside this file) and the user's site marks.

`engines.toml` says how to tell the engine (and the stack around it) from any single line. Where
in a traceback an allocation failed, and in which phase, comes from the tables generated from the
engines' sources (`code.py`, `generated/`). Users add to both from a `--rules DIR` with files
named `engine-markers.toml` and `site-marks.toml`;
every problem in them is reported as ``file:line: message`` before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
#: The files in a rules directory that extend these tables (not rules themselves).
USER_MARKERS = "engine-markers.toml"
USER_SITES = "site-marks.toml"
RESERVED_FILES = frozenset({USER_MARKERS, USER_SITES})

#: Serving engines, and the engine family whose flags their advice uses.
FAMILY: Mapping[str, str] = MappingProxyType(
    {
        "sglang": "sglang",
        "sglang-omni": "sglang",
        "vllm": "vllm",
        "vllm-omni": "vllm",
        "vllm-ascend": "vllm",
    }
)
#: Parts of the stack around an engine that markers can name (they never pick the engine).
STACK = (
    "verl",
    "slime",
    "openrlhf",
    "torch_memory_saver",
    "vllm-sleep-mode",
    "ray",
    "xinference",
    "kvcached",
    "ascend-npu",
)
#: Envelope styles normalise() recognises (oomdoctor.normalise).
ENVELOPES = (
    "sglang",
    "sglang-time",
    "omni-sglang",
    "omni",
    "vllm",
    "vllm-old",
    "torch-cpp",
    "ascend",
    "pylog",
    "iso",
    "glog",
)
WHERE = ("envelope", "actor", "text", "frame")
DEFAULT_STRENGTH = MappingProxyType({"envelope": 3.0, "actor": 2.0, "text": 2.0, "frame": 1.0})
ROLES = ("engine", "driver")
SITES = (
    "weights",
    "kv_pool",
    "resume",
    "graph_capture",
    "encoder",
    "logits",
    "sampling",
    "comm",
    "forward",
)
PHASES = ("startup", "running")
#: How reports say where an allocation failed (a site of SITES) and when (a phase of PHASES).
SITE_WORDS: Mapping[str, str] = MappingProxyType(
    {
        "weights": "while loading the weights",
        "kv_pool": "while allocating the KV cache",
        "resume": "while re-mapping memory after a release (wake-up or resume)",
        "graph_capture": "while capturing CUDA graphs",
        "encoder": "in the vision/audio encoder",
        "logits": "in the logits processor",
        "sampling": "while sampling",
        "comm": "in a collective (NCCL) buffer",
        "forward": "in a forward pass",
    }
)
PHASE_WORDS: Mapping[str, str] = MappingProxyType(
    {"startup": "at startup", "running": "while serving", "warmup": "during warmup"}
)
_MARKER_KEYS = frozenset({"engine", "where", "match", "role", "strength", "note"})
_MARK_KEYS = frozenset({"frames", "code", "text", "stages", "note"})


class EngineMarker(NamedTuple):
    engine: str
    where: str
    match: str
    role: str | None = None
    strength: float = 2.0
    note: str = ""
    regex: re.Pattern[str] | None = None  # actors only


class Marks(NamedTuple):
    """The marks of one site or phase."""

    name: str
    frames: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    stages: tuple[re.Pattern[str], ...] = ()


class Knowledge(NamedTuple):
    markers: tuple[EngineMarker, ...]
    sites: tuple[Marks, ...]
    phases: tuple[Marks, ...]

    def anchors(self) -> tuple[str, ...]:
        """Literals whose lines the fast scan must keep: text markers and code marks."""
        out = {m.match for m in self.markers if m.where == "text"}
        for marks in (*self.sites, *self.phases):
            out.update(marks.code)
            out.update(marks.text)
        return tuple(sorted(out))


class KnowledgeError(Exception):
    """One or more marker files are invalid; ``problems`` are ``file:line: message`` strings."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


@lru_cache(maxsize=1)
def builtin() -> Knowledge:
    """The shipped tables (a bad built-in table is a bug: it raises)."""
    return load(())


def load(dirs: Iterable[Path]) -> Knowledge:
    """The built-in tables plus the marker files of ``dirs``; KnowledgeError lists every problem."""
    problems: list[str] = []
    markers = list(_markers(HERE / "engines.toml", problems))
    # Where and when code runs comes from the tables generated from the engines' sources
    # (knowledge/code.py); the marks here are only the user's own (site-marks.toml).
    sites: list[Marks] = []
    phases: list[Marks] = []
    for directory in dirs:
        path = directory / USER_MARKERS
        if path.exists():  # a FIFO or a device is refused by the read, not skipped
            markers.extend(_markers(path, problems))
        path = directory / USER_SITES
        if path.exists():  # a FIFO or a device is refused by the read, not skipped
            extra_sites, extra_phases = _marks(path, problems)
            sites = _merge(sites, extra_sites)
            phases = _merge(phases, extra_phases)
    if problems:
        raise KnowledgeError(problems)
    return Knowledge(tuple(markers), tuple(sites), tuple(phases))


def _read(path: Path, problems: list[str]) -> tuple[str, dict[str, Any]] | None:
    from oomdoctor.knowledge import toml_file

    read = toml_file.read(path, "not valid TOML")
    if isinstance(read, str):
        problems.append(read)
        return None
    return read


def _table_lines(text: str, name: str) -> list[int]:
    """1-based line of each ``[[name]]`` header, in order (for error messages)."""
    pattern = re.compile(rf"^\s*\[\[\s*{re.escape(name)}\s*\]\]")
    return [i + 1 for i, line in enumerate(text.splitlines()) if pattern.match(line)]


def _markers(path: Path, problems: list[str]) -> list[EngineMarker]:
    read = _read(path, problems)
    if read is None:
        return []
    text, data = read
    unknown_top = set(data) - {"marker"}
    for key in sorted(unknown_top):
        problems.append(f'{path}:1: unknown table "{key}" (expected [[marker]] entries)')
    entries = data.get("marker", [])
    if not isinstance(entries, list):
        problems.append(f"{path}:1: `marker` must be a list of [[marker]] tables")
        return []
    lines = _table_lines(text, "marker")
    out = []
    for index, entry in enumerate(entries):
        where = f"{path}:{lines[index] if index < len(lines) else 1}"
        marker = _marker(entry, where, problems)
        if marker is not None:
            out.append(marker)
    return out


def _marker(entry: object, where: str, problems: list[str]) -> EngineMarker | None:
    if not isinstance(entry, dict):
        problems.append(f"{where}: a marker must be a table")
        return None
    ok = True
    for key in sorted(set(entry) - _MARKER_KEYS):
        problems.append(f'{where}: unknown key "{key}" in a marker')
        ok = False
    engine, kind, match = entry.get("engine"), entry.get("where"), entry.get("match")
    if not isinstance(engine, str) or (engine not in FAMILY and engine not in STACK):
        known = ", ".join((*FAMILY, *STACK))
        problems.append(f"{where}: engine must be one of {known} (got {engine!r})")
        ok = False
    if kind not in WHERE:
        problems.append(f"{where}: where must be one of {', '.join(WHERE)} (got {kind!r})")
        ok = False
    if not isinstance(match, str) or not match:
        problems.append(f"{where}: match must be a non-empty string")
        ok = False
    elif kind == "envelope" and match not in ENVELOPES:
        problems.append(
            f"{where}: unknown envelope style {match!r} (known: {', '.join(ENVELOPES)})"
        )
        ok = False
    role = entry.get("role")
    if role is not None and (kind != "actor" or role not in ROLES):
        problems.append(f"{where}: role ({', '.join(ROLES)}) applies to actor markers only")
        ok = False
    strength = entry.get("strength", DEFAULT_STRENGTH.get(str(kind), 1.0))
    if (
        isinstance(strength, bool)
        or not isinstance(strength, int | float)
        or not 0 <= strength <= 10
    ):
        problems.append(f"{where}: strength must be a number from 0 to 10")
        ok = False
    note = entry.get("note", "")
    if not isinstance(note, str):
        problems.append(f"{where}: note must be a string")
        ok = False
    regex = None
    if ok and kind == "actor":
        regex = _compile(str(match), where, problems)
        ok = regex is not None
    if not ok:
        return None
    return EngineMarker(
        engine=str(engine),
        where=str(kind),
        match=str(match),
        role=role,
        strength=float(strength),
        note=note,
        regex=regex,
    )


def _compile(pattern: str, where: str, problems: list[str]) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        problems.append(f"{where}: bad regex {pattern!r}: {exc}")
        return None


def _marks(path: Path, problems: list[str]) -> tuple[list[Marks], list[Marks]]:
    read = _read(path, problems)
    if read is None:
        return [], []
    text, data = read
    for key in sorted(set(data) - {"site", "phase"}):
        problems.append(f'{path}:1: unknown table "{key}" (expected [[site]] or [[phase]])')
    out: dict[str, list[Marks]] = {"site": [], "phase": []}
    for table, names in (("site", SITES), ("phase", PHASES)):
        entries = data.get(table, [])
        if not isinstance(entries, list):
            problems.append(f"{path}:1: `{table}` must be a list of [[{table}]] tables")
            continue
        lines = _table_lines(text, table)
        for index, entry in enumerate(entries):
            where = f"{path}:{lines[index] if index < len(lines) else 1}"
            marks = _one_marks(entry, table, names, where, problems)
            if marks is not None:
                out[table].append(marks)
    return out["site"], out["phase"]


def _one_marks(
    entry: object, table: str, names: Sequence[str], where: str, problems: list[str]
) -> Marks | None:
    if not isinstance(entry, dict):
        problems.append(f"{where}: a {table} must be a table")
        return None
    name = entry.get(table)
    ok = True
    if name not in names:
        problems.append(f"{where}: no such {table}: {name!r} (known: {', '.join(names)})")
        ok = False
    for key in sorted(set(entry) - _MARK_KEYS - {table}):
        problems.append(f'{where}: unknown key "{key}" in a {table}')
        ok = False
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("frames", "code", "text", "stages"):
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            problems.append(f"{where}: {key} must be a list of non-empty strings")
            ok = False
            continue
        lists[key] = tuple(value)
    stages = []
    for pattern in lists.get("stages", ()):
        compiled = _compile(pattern, where, problems)
        if compiled is None:
            ok = False
        else:
            stages.append(compiled)
    if not ok:
        return None
    return Marks(
        name=str(name),
        frames=lists["frames"],
        code=lists["code"],
        text=lists["text"],
        stages=tuple(stages),
    )


def _merge(base: list[Marks], extra: list[Marks]) -> list[Marks]:
    """User marks join the built-in entry of the same name (keeping its precedence)."""
    by_name = {m.name: m for m in base}
    order = [m.name for m in base]
    for m in extra:
        old = by_name.get(m.name)
        if old is None:
            by_name[m.name] = m
            order.append(m.name)
            continue
        by_name[m.name] = Marks(
            m.name,
            old.frames + m.frames,
            old.code + m.code,
            old.text + m.text,
            old.stages + m.stages,
        )
    return [by_name[n] for n in order]


def family(engine: str | None) -> str | None:
    """``sglang`` or ``vllm`` (whose flags the advice uses), or None when the engine is unknown."""
    return FAMILY.get(engine or "")
