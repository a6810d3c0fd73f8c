"""Where and when a traceback ran, read from the tables generated from the engines' sources
(knowledge/code.py) and the user's own site marks (a `site-marks.toml` in a `--rules DIR`).

Every frame is looked up; the most specific site any frame names wins, in the order of
knowledge.SITES (weights, the KV pool and a re-map are what startup and sleep mode allocate;
a graph capture runs a forward and a ViT runs inside the model's forward, so capture and encoder
outrank the generic forward). A frame on a startup-only path makes the failure a startup one; a
frame of a serving loop, a running one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.judge import sites
from oomdoctor.judge.records import Decision, frame_name
from oomdoctor.knowledge import SITES, Knowledge
from oomdoctor.model import Frame, Line

if TYPE_CHECKING:
    from oomdoctor.knowledge.code import CodeRole

#: Strength of what a table or a user's mark says about a frame.
TABLE = 0.85
#: Strength of what a message of the engines' own says about the line it is on.
MESSAGE = 0.8


class Found(NamedTuple):
    site: str
    why: str
    frame: Frame | None
    line: Line | None


def _role(frame: Frame) -> tuple[str | None, str | None, str]:
    role = _code_role(frame)
    if role is None:
        return None, None, ""
    return role.site, role.phase, role.why


def _code_role(frame: Frame) -> CodeRole | None:
    from oomdoctor.knowledge import code

    return code.frame_role(frame.path, frame.func, frame.lineno or None, frame.code)


def _frame_sites(frames: Sequence[Frame]) -> list[Found]:
    """The site of each frame the tables place, outermost first. Below a frame of a file that
    holds text models only, a shared layer (vLLM's attention/layer.py holds the ViTs'
    MultiHeadAttention beside the decoder's Attention) runs for the language model: an encoder
    reading of it, which the tables make from line spans of other releases, does not stand."""
    found: list[Found] = []
    text_caller: Frame | None = None
    for frame in frames:
        role = _code_role(frame)
        if role is None or role.site is None:
            continue
        why = f"{frame_name(frame)}: {role.why}"
        site = role.site
        if role.side == "text":
            text_caller = frame
        elif site == "encoder" and text_caller is not None:
            site = "forward"
            why = f"{frame_name(frame)} is called by {frame_name(text_caller)}, a text model's code"
        found.append(Found(site, why, frame, frame.line))
    return found


def site(
    frames: Sequence[Frame], knowledge: Knowledge, texts: Sequence[tuple[str, Line]]
) -> Decision | None:
    """The most specific site the frames (tables, then the user's marks) or the texts (the
    engines' own messages) name, with the frame or line that names it."""
    found = _frame_sites(frames)
    marked, at = sites.classify(frames, knowledge, [t for t, _ in texts])
    if marked != "unknown":
        where = frame_name(at) if at is not None else "a line"
        found.append(Found(marked, f"{where} has a site mark of yours", at, None))
    for text, line in texts:
        message = _message(text)
        if message is not None and message[0] is not None:
            found.append(Found(message[0], message[2], None, line))
    if not found:
        return None
    best = min(found, key=lambda f: SITES.index(f.site) if f.site in SITES else len(SITES))
    said = best.line or (best.frame.line if best.frame is not None else None)
    return Decision(best.site, best.why, said, TABLE if best.frame is not None else MESSAGE)


def phase(
    frames: Sequence[Frame], knowledge: Knowledge, texts: Sequence[tuple[str, Line]]
) -> Decision | None:
    """startup when any frame or message is on a startup-only path, else running for a serving
    loop's (None: the traceback does not say)."""
    startup: Decision | None = None
    running: Decision | None = None
    for frame in frames:
        _, when, why = _role(frame)
        decision = Decision(when or "", f"{frame_name(frame)}: {why}", frame.line, TABLE)
        if when == "startup" and startup is None:
            startup = decision
        elif when == "running" and running is None:
            running = decision
    for text, said in texts:
        message = _message(text)
        if message is not None and message[1] in ("startup", "running"):
            decision = Decision(message[1], message[2], said, MESSAGE)
            if message[1] == "startup" and startup is None:
                startup = decision
            elif message[1] == "running" and running is None:
                running = decision
    user = sites.phase_mark(frames, knowledge, [t for t, _ in texts])
    if user is not None:
        name, marked = user
        where = frame_name(marked) if marked is not None else "a line"
        decision = Decision(
            name, f"{where} has a phase mark of yours", marked.line if marked else None, TABLE
        )
        if name == "startup":
            startup = startup or decision
        else:
            running = running or decision
    return startup or running


#: vLLM V0's worker wrapper names the worker method it was running when the error came.
_METHOD = re.compile(r"while processing method (?P<name>\w+)")


def _message(text: str) -> tuple[str | None, str | None, str] | None:
    from oomdoctor.knowledge import code

    role = code.message_role(text)
    if role is not None:
        return role.site, role.phase, f"the engine's own message: {role.why}"
    m = _METHOD.search(text)
    return _worker_method(m.group("name")) if m else None


@lru_cache(maxsize=64)
def _worker_method(name: str) -> tuple[str | None, str | None, str] | None:
    """The site and phase of a vLLM worker method named in a wrapper's text, by the function
    table of the worker modules (every class of vllm/worker/ and vllm/v1/worker/ that has it)."""
    from oomdoctor.knowledge import code_tables as tables

    modules = tables.table("functions.json").get("functions", {})
    labels = [
        label
        for module in modules
        if module.startswith(("vllm/worker/", "vllm/v1/worker/"))
        for methods in tables.functions(module).values()
        for label in methods.get(name, ())
    ]
    if not labels:
        return None
    site = _one({x.site for x in labels})
    phase = _one({x.phase for x in labels})
    if site is None and phase is None:
        return None
    why = (
        f"the worker was running its method {name} ("
        + ", ".join(w for w in (site, f"at {phase}" if phase else None) if w)
        + " by the call graph of vllm's worker modules)"
    )
    return site, phase, why


def _one(values: set[str | None]) -> str | None:
    values.discard(None)
    return values.pop() if len(values) == 1 else None
