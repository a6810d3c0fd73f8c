"""What a traceback frame, a log message or a stage name says about where and when memory ran
out, looked up in the tables generated from the engines' own sources (``generated/``, built by
``python -m tools.gen_knowledge``; see ``tools/gen_knowledge/__init__.py``).

``frame_role`` decides, in order: for a path outside the engines' packages, an override
(``overrides.toml``: torch, NCCL and the memory savers, which the generator does not read); for
a multimodal model file, the printed code line's
hash when that line occurs only in encoder methods of the file, then ``(func, lineno)`` by the
majority of the indexed releases whose file has a function of that name at that line, then
``func`` alone when every
class that has it agrees; for a file that holds text models only (no tower, no multimodal class),
a forward is the language model's (site ``forward``); the call-graph table gives the site and
phase of the function itself.
Releases that disagree, a line outside every span, or classes that disagree give a weaker answer
(the multimodal role without a method) or None, never a guess. ``name_heuristic`` is the
fallback for code in no table.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from oomdoctor.knowledge import code_tables as tables
from oomdoctor.knowledge.code_paths import engine_of, module_path, name_heuristic, words

__all__ = [
    "CodeRole",
    "frame_role",
    "message_anchors",
    "message_role",
    "name_heuristic",
    "stage_role",
]

OVERRIDES = Path(__file__).resolve().parent / "overrides.toml"
#: The call-graph phase of dispatch loops and process entry points (worker_busy_loop,
#: run_scheduler_process): both phases' work runs under them.
EITHER = "either"
#: A message fragment is matched by this many first characters when the line is cut after them.
PREFIX = 48
#: ... or, after earlier fragments matched at least PREFIX characters, by what is left of the line
#: when the line ends inside it (at least this many characters): "... with 1024 dummy requests."
CUT_TAIL = 12


class CodeRole(NamedTuple):
    site: str | None  # one of oomdoctor.knowledge.SITES, or None
    phase: str | None  # "startup" | "running" | None
    engine: str  # sglang | vllm | sglang-omni | vllm-omni | vllm-ascend | transformers (or an
    # override's package)
    module: str  # e.g. "vllm/model_executor/models/qwen2_5_vl.py"
    qualname: str  # e.g. "Qwen2_5_VisionAttention.forward"
    why: str  # one line a report can show, naming the releases it was derived from
    #: "e" an encoder's code, "l" a multimodal model's language side, "text" a file of text
    #: models only (whatever such a frame calls runs for the language model); None: no model's
    side: str | None = None


class _Override(NamedTuple):
    path: str
    func: str
    site: str | None
    phase: str | None
    reason: str


class _Mm(NamedTuple):
    role: str  # "e" encoder, "l" language side
    qualname: str
    why: str


def frame_role(path: str, func: str, lineno: int | None = None, code: str = "") -> CodeRole | None:
    """The site and phase of one traceback frame, or None when no table knows its code."""
    name = func.rsplit(".", 1)[-1]
    module = module_path(path, tables.known)
    if module is None:
        text = path.replace("\\", "/")
        for rule in _overrides():
            if rule.path in text and (not rule.func or rule.func == name):
                package = rule.path.strip("/").split("/", 1)[0]
                return CodeRole(rule.site, rule.phase, package, rule.path, name, rule.reason)
        return None
    engine = engine_of(module)
    mm = _multimodal(module, engine, func, lineno, code)
    side = mm.role if mm is not None else None
    if mm is None:
        mm = _text_model(module, engine, func)
        side = "text" if mm is not None else None
    fn = _function(module, engine, func, mm.qualname if mm else "")
    if fn is None and mm is None:
        return None
    site = fn.site if fn is not None and fn.site else None
    if site is None and mm is not None:
        site = "encoder" if mm.role == "e" else "forward"
    phase = fn.phase if fn is not None else None
    qualname = mm.qualname if mm is not None else fn.qualname if fn is not None else name
    why = "; ".join(w for w in (mm.why if mm else "", fn.why if fn and fn.site else "") if w)
    if not why and fn is not None:
        why = fn.why
    return CodeRole(site, phase, engine, module, qualname, why, side)


def _multimodal(module: str, engine: str, func: str, lineno: int | None, code: str) -> _Mm | None:
    variants = tables.mm_file(module)
    if not variants:
        return None
    owner, _, name = func.rpartition(".")
    spans = _by_line(variants, engine, name, owner, lineno) if lineno else None
    if code.strip() and _encoder_line(module, code):
        said = f"the code line occurs only in encoder methods of {module}"
        if spans is not None and spans.role == "e":
            return _Mm("e", spans.qualname, f"{said}; {spans.why}")
        return _Mm("e", name, f"{said} (in its indexed {engine} releases)")
    if spans is not None:
        return spans
    return _by_name(variants, engine, module, name, owner)


def _text_model(module: str, engine: str, func: str) -> _Mm | None:
    """The language side for a forward of a text model's file (every class of it is a text
    model's part: no tower, no multimodal class)."""
    mask = tables.text_file(module)
    name = func.rsplit(".", 1)[-1]
    if not mask or not (name == "__call__" or name.startswith(("forward", "_forward"))):
        return None
    why = (
        f"{module} holds text models only ({tables.versions(engine, mask)}): its {name} is "
        "the language model's"
    )
    return _Mm("l", func, why)


def _encoder_line(module: str, code: str) -> bool:
    line = code.strip()
    if len(line) < int(tables.table("code_lines.json").get("min_line", 16)):
        return False
    digest = hashlib.blake2b(line.encode("utf-8"), digest_size=tables.hash_bytes()).digest()
    return digest in tables.line_hashes(module)


def _role_at(variant: tables.Variant, name: str, owner: str, lineno: int) -> tuple[str, str] | None:
    """(role, qualname) of the innermost class whose span holds the line and that has ``name``."""
    best: tuple[int, str, str] | None = None
    for layout, start, end in variant.classes:
        if not start <= lineno <= end or (owner and layout.cls != owner):
            continue
        if name not in layout.methods:
            continue
        role = layout.role
        if role == "t":
            offset, length = layout.encoder_methods.get(name, (-1, 0))
            inside = offset >= 0 and start + offset <= lineno <= start + offset + length
            role = "e" if inside else "l"
        if best is None or end - start < best[0]:
            best = (end - start, role, f"{layout.cls}.{name}")
    return None if best is None else (best[1], best[2])


def _by_line(
    variants: tuple[tables.Variant, ...], engine: str, name: str, owner: str, lineno: int
) -> _Mm | None:
    holding = 0  # releases whose file has a method of that name at that line
    votes: Counter[tuple[str, str]] = Counter()
    masks: dict[tuple[str, str], int] = {}
    for variant in variants:
        hit = _role_at(variant, name, owner, lineno)
        if hit is not None:
            count = variant.mask.bit_count()
            holding += count
            votes[hit] += count
            masks[hit] = masks.get(hit, 0) | variant.mask
    if not votes:
        return None
    by_role: Counter[str] = Counter()
    for (role, _), n in votes.items():
        by_role[role] += n
    role, n = by_role.most_common(1)[0]
    if 2 * n <= holding:
        return None  # the releases disagree on what that line is
    (best_role, qual), _ = max(((k, v) for k, v in votes.items() if k[0] == role), key=_count)
    side = "an encoder class" if best_role == "e" else "the language side"
    mask = 0
    for key, m in masks.items():
        if key[0] == role:
            mask |= m
    return _Mm(
        role,
        qual,
        f"line {lineno} is in {qual}, {side}, in {n} of the {holding} indexed releases "
        f"with a {name} there ({tables.versions(engine, mask)})",
    )


def _count(item: tuple[tuple[str, str], int]) -> int:
    return item[1]


def _by_name(
    variants: tuple[tables.Variant, ...], engine: str, module: str, name: str, owner: str
) -> _Mm | None:
    found: dict[tuple[str, str], int] = {}
    for variant in variants:
        for layout, _, _ in variant.classes:
            if name not in layout.methods or (owner and layout.cls != owner):
                continue
            role = layout.role
            if role == "t":
                role = "e" if name in layout.encoder_methods else "l"
            key = (role, f"{layout.cls}.{name}")
            found[key] = found.get(key, 0) | variant.mask
    roles = {role for role, _ in found}
    if len(roles) != 1:
        return None
    role = roles.pop()
    mask = 0
    for m in found.values():
        mask |= m
    quals = sorted({q for _, q in found})
    side = "encoder" if role == "e" else "language-side"
    where = quals[0] if len(quals) == 1 else f"{len(quals)} classes"
    return _Mm(
        role,
        quals[0] if len(quals) == 1 else name,
        f"every {name} of {module} is {side} ({where}; {tables.versions(engine, mask)})",
    )


class _Fn(NamedTuple):
    site: str | None
    phase: str | None
    qualname: str
    why: str


def _function(module: str, engine: str, func: str, qual_hint: str) -> _Fn | None:
    rows = tables.functions(module)
    owner, _, name = (qual_hint or func).rpartition(".")
    candidates = []
    for cls, methods in rows.items():
        if owner and cls != owner:
            continue
        if name in methods:
            candidates.append((f"{cls}.{name}" if cls else name, methods[name]))
    by_pattern = tables.patterns().get(name)
    if not candidates:
        if by_pattern is None or not (tables.mm_file(module) or rows):
            return None
        why = f"{name} is a {by_pattern} seed in every class ({engine})"
        return _Fn(by_pattern, None, (qual_hint or func), why)
    sites = {_majority(labels, "site") for _, labels in candidates}
    phases = {_majority(labels, "phase") for _, labels in candidates}
    site = sites.pop() if len(sites) == 1 else None
    phase = phases.pop() if len(phases) == 1 else None
    if site is None and by_pattern is not None and len(sites) == 0:
        site = by_pattern
    qual = candidates[0][0] if len(candidates) == 1 else name
    mask = 0
    for _, labels in candidates:
        for label in labels:
            mask |= label.mask
    said = " ".join(x for x in (site or "", f"at {phase}" if phase else "") if x) or "no role"
    if phase == EITHER:  # known, and honestly neither phase: the frames below decide
        phase = None
        said = " ".join(
            x
            for x in (
                site or "",
                "in either phase (it runs startup's and "
                "serving's work alike: the frames below decide)",
            )
            if x
        )
    return _Fn(
        site, phase, qual, f"{qual}: {said} by the call graph ({tables.versions(engine, mask)})"
    )


def _majority(labels: tuple[tables.Label, ...], field: str) -> str | None:
    counts: Counter[str | None] = Counter()
    for label in labels:
        counts[getattr(label, field)] += label.mask.bit_count()
    ranked = counts.most_common(2)
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    return ranked[0][0]


def _cut_fragment(text: str, part: str, pos: int, least: int) -> tuple[int, int]:
    """Where ``part`` starts in ``text`` (at or after ``pos``) when the line ends inside it, with
    at least ``least`` of its characters there, and how many count (PREFIX at most); (-1, 0)
    when no such cut is there."""
    end = len(text.rstrip())
    found = text.find(part[:least], max(pos, end - len(part) + 1))
    while found >= 0:
        rest = text[found:end]
        if part.startswith(rest):
            return found, min(len(rest), PREFIX)
        found = text.find(part[:least], found + 1)
    return -1, 0


def message_role(text: str) -> CodeRole | None:
    """The memory-check message of table d that a log line shows, with its emitter's role.

    Every long literal fragment of the message must appear, in order; a fragment cut at the end
    of the line (a wrapped or truncated paste) counts by its first ``PREFIX`` characters.
    Backticks are ignored and white space runs count as one space.
    """
    text = _plain(text)
    best: tuple[tuple[int, int], tables.Message] | None = None
    for anchor, parts, message in _message_index():
        if anchor not in text:
            continue
        pos, score = 0, 0
        for part in parts:
            found = text.find(part, pos)
            size = len(part)
            if found < 0:
                found, size = _cut_fragment(text, part, pos, PREFIX if score < PREFIX else CUT_TAIL)
            if found < 0:
                break
            pos, score = found + size, score + size
        else:
            rank = (score, message.mask.bit_count())  # ties: the message more releases print
            if best is None or rank > best[0]:
                best = (rank, message)
    if best is None:
        return None
    message = best[1]
    engine = engine_of(message.module)
    fn = _function(message.module, engine, message.qualname, message.qualname)
    site = fn.site if fn else None
    phase = fn.phase if fn else None
    verb = "raises" if message.how in ("r", "a") else "logs"
    why = (
        f"{tables.versions(engine, message.mask)} {verb} this in {message.qualname} "
        f"({message.module})"
    )
    return CodeRole(site, phase, engine, message.module, message.qualname, why)


def _plain(text: str) -> str:
    """The log line as table d stores messages: no backticks (a Markdown-rendered paste loses
    them), one space for each run of white space."""
    return " ".join(text.replace("`", "").split())


@lru_cache(maxsize=1)
def _message_index() -> tuple[tuple[str, tuple[str, ...], tables.Message], ...]:
    least = int(tables.table("messages.json").get("min_fragment", 14))
    out = []
    for message in tables.messages():
        parts = tuple(p for p in message.fragments if len(p) >= least)
        if parts:
            out.append((parts[0][:PREFIX], parts, message))  # a cut line keeps the start
    return tuple(out)


def message_anchors() -> tuple[str, ...]:
    """The first ``PREFIX`` characters of the first long literal fragment of every message of
    table d (for the line scanner: a line holding none of them matches no message)."""
    return tuple(sorted({anchor for anchor, _, _ in _message_index()}))


def stage_role(name: str) -> str | None:
    """``encoder`` for an encoder-like pipeline stage (image/audio encoder, ASR, vocoder), else
    None. A name the tables do not hold is read with the same word vocabulary."""
    known, vocabulary = tables.stages()
    key = name.strip().rsplit(".", 1)[-1]
    like = set(vocabulary.get("encoder_like", ()))
    row = known.get(key) or known.get(key.lower())
    if row is not None:
        return "encoder" if row.get("kind") in like else None
    found = set(words(key))
    for kind in vocabulary.get("order", ()):
        if found & set(vocabulary.get(kind, ())):
            return "encoder" if kind in like else None
    return None


@lru_cache(maxsize=1)
def _overrides() -> tuple[_Override, ...]:
    from oomdoctor.knowledge import toml_file

    read = toml_file.read(OVERRIDES)
    if isinstance(read, str):
        raise ValueError(read)  # a broken shipped table is a bug
    out = []
    for entry in read[1].get("override", []):
        out.append(
            _Override(
                str(entry["path"]),
                str(entry.get("func", "")),
                entry.get("site") or None,
                entry.get("phase") or None,
                str(entry["reason"]),
            )
        )
    return tuple(out)
