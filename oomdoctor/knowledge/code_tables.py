"""The generated tables (``generated/*.json``, written by ``python -m tools.gen_knowledge``),
read lazily: a table is parsed the first time a lookup needs it, a file's rows the first time a
frame names that file. A missing or unreadable table reads as empty (lookups answer None).
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

GENERATED = Path(__file__).resolve().parent / "generated"
SITE_CODES = MappingProxyType(
    {
        "w": "weights",
        "k": "kv_pool",
        "r": "resume",
        "g": "graph_capture",
        "e": "encoder",
        "l": "logits",
        "s": "sampling",
        "c": "comm",
        "f": "forward",
    }
)
#: ``either``: a dispatch loop or process entry that runs both phases' work (code.frame_role
#: answers phase None for it, with that reason).
PHASE_CODES = MappingProxyType({"s": "startup", "r": "running", "x": "either"})


class Layout(NamedTuple):
    """One class of a multimodal file: role ``e`` encoder, ``l`` language, ``t`` the top-level
    model (its encoder methods carry their span offsets); ``via`` is empty (the generator no
    longer writes how a class was found: no lookup reads it)."""

    cls: str
    role: str
    methods: frozenset[str]
    encoder_methods: MappingProxyType[str, tuple[int, int]]
    via: str


class Variant(NamedTuple):
    mask: int  # releases holding this variant of the file (bits of the engine's list)
    classes: tuple[tuple[Layout, int, int], ...]  # layout, first line, last line


class Label(NamedTuple):
    site: str | None
    phase: str | None
    mask: int


class Message(NamedTuple):
    module: str
    qualname: str
    how: str  # r raise, a assert, w warnings.warn, l a logger call
    mask: int
    fragments: tuple[str, ...]


@lru_cache(maxsize=8)
def table(name: str) -> MappingProxyType[str, Any]:
    try:
        data = json.loads((GENERATED / name).read_text("utf-8"))
    except (OSError, ValueError):
        data = {}
    return MappingProxyType(data if isinstance(data, dict) else {})


def releases(engine: str) -> tuple[str, ...]:
    return tuple(table("multimodal.json").get("releases", {}).get(engine, ()))


def versions(engine: str, mask: int) -> str:
    """``vllm 0.7.3-0.9.2`` for a run of consecutive releases, else the list."""
    names = releases(engine)
    held = [i for i in range(len(names)) if mask >> i & 1]
    if not held:
        return engine
    runs: list[str] = []
    start = prev = held[0]
    for i in [*held[1:], -1]:
        if i == prev + 1:
            prev = i
            continue
        runs.append(names[start] if start == prev else f"{names[start]}-{names[prev]}")
        start = prev = i
    return f"{engine} {', '.join(runs)}"


def known(module: str) -> bool:
    """Whether a frame table holds ``module``."""
    return (
        module in table("multimodal.json").get("files", {})
        or module in table("functions.json").get("functions", {})
        or bool(text_file(module))
    )


def text_file(module: str) -> int:
    """The releases (mask) in which ``module`` holds text models' classes only, or 0."""
    return _text_files().get(module, 0)


@lru_cache(maxsize=1)
def _text_files() -> dict[str, int]:
    """``multimodal.json``'s ``text``: folder -> ``name:mask,...`` (``=`` for transformers'
    ``<folder>/modeling_<folder>.py``)."""
    out = {}
    for folder, items in table("multimodal.json").get("text", {}).items():
        for item in items.split(","):
            name, _, mask = item.partition(":")
            if name == "=":
                name = f"modeling_{folder.rpartition('/')[2]}"
            out[f"{folder}/{name}.py"] = int(mask, 16)
    return out


@lru_cache(maxsize=512)
def mm_file(module: str) -> tuple[Variant, ...]:
    raw = table("multimodal.json").get("files", {}).get(module)
    if not raw:
        return ()
    tops = {cls: frozenset(names.split(",")) for cls, names in raw.get("t", {}).items()}
    layouts = [_layout(row, tops) for row in raw["k"]]
    out = []
    for mask, spans in raw["v"]:
        classes = []
        for span in spans.split(";"):
            index, start, end = (int(x) for x in span.split(":"))
            classes.append((layouts[index], start, end))
        out.append(Variant(int(mask), tuple(classes)))
    return tuple(out)


def _layout(row: list[str], tops: dict[str, frozenset[str]]) -> Layout:
    cls, role, names, via = row
    methods: list[str] = list(tops.get(cls, ())) if role == "t" else []
    encoder = {}
    for item in names.split(",") if names else ():
        name, _, span = item.partition("@")
        methods.append(name)
        if span:
            offset, _, length = span.partition("+")
            encoder[name] = (int(offset), int(length))
    return Layout(cls, role, frozenset(methods), MappingProxyType(encoder), via)


@lru_cache(maxsize=512)
def line_hashes(module: str) -> frozenset[bytes]:
    raw = table("code_lines.json").get("hashes", {}).get(module)
    if not raw:
        return frozenset()
    blob = base64.b64decode(raw)
    size = int(table("code_lines.json").get("hash_bytes", 3))
    return frozenset(blob[i : i + size] for i in range(0, len(blob), size))


def hash_bytes() -> int:
    return int(table("code_lines.json").get("hash_bytes", 3))


@lru_cache(maxsize=512)
def functions(module: str) -> MappingProxyType[str, MappingProxyType[str, tuple[Label, ...]]]:
    """class ("" for module functions) -> function -> labels, for one module."""
    raw = table("functions.json").get("functions", {}).get(module, {})
    out = {}
    for owner, items in raw.items():
        row = {}
        for item in items.split(";"):
            name, _, codes = item.partition("=")
            labels = []
            for code in codes.split("|"):
                site, phase = SITE_CODES.get(code[0]), PHASE_CODES.get(code[1])
                labels.append(Label(site, phase, int(code[2:], 16)))
            row[name] = tuple(labels)
        out[owner] = MappingProxyType(row)
    return MappingProxyType(out)


def patterns() -> MappingProxyType[str, str]:
    """Method name -> site of the class-agnostic seeds (``load_weights`` -> weights)."""
    return MappingProxyType(dict(table("functions.json").get("patterns", {})))


@lru_cache(maxsize=1)
def messages() -> tuple[Message, ...]:
    out = []
    for module, rows in table("messages.json").get("messages", {}).items():
        for qual, how, mask, *frags in rows:
            out.append(Message(module, qual, how, int(mask), tuple(frags)))
    return tuple(out)


def stages() -> tuple[MappingProxyType[str, Any], MappingProxyType[str, Any]]:
    """(stage name -> row, the stage-kind vocabulary)."""
    data = table("stages.json")
    return (
        MappingProxyType(dict(data.get("stages", {}))),
        MappingProxyType(dict(data.get("vocabulary", {}))),
    )
