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

from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from oomdoctor.knowledge import code_tables as tables
from oomdoctor.knowledge.code_mm import multimodal, text_model
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
    mm = multimodal(module, engine, func, lineno, code)
    side = mm.role if mm is not None else None
    if mm is None:
        mm = text_model(module, engine, func)
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
