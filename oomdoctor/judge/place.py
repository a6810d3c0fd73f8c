"""Where and when a failure happened: its site and its phase, each a Decision with the line
and the reasoning that settled it.

The sources, strongest first. Phase: a failure kind that only exists at startup; a frame or
text whose code the generated tables place (judge/code_sites.py; a user's site marks first); the launch's state when it was printed (its
Clues: the ready line before it, the startup lines before it). Site: the frames' and texts'
site marks, the pipeline stage, else the startup step the failure interrupted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.judge import code_sites, heuristics
from oomdoctor.judge import phase as phases
from oomdoctor.judge.records import Decision, frame_name
from oomdoctor.knowledge import Knowledge, code
from oomdoctor.knowledge.kinds import OOM_KINDS
from oomdoctor.model import EMPTY, Failure, Frame, Line, Scalar

#: The SGLang startup step a failure interrupted, by the last checkpoint its rank printed.
_CHECKPOINT_SITES = MappingProxyType(
    {"load_begin": "weights", "load_end": "kv_pool", "graph_begin": "graph_capture"}
)
_CHECKPOINT_WORDS = MappingProxyType(
    {
        "load_begin": "weight loading had begun",
        "load_end": "the weights were loaded, the KV pool not yet built",
        "graph_begin": "CUDA-graph capture had begun",
    }
)


class Placement(NamedTuple):
    site: Decision
    phase: Decision
    frame: Frame | None  # the frame that placed the site (evidence)
    phase_rival: Decision | None = None  # a weaker source that says another phase


def _line_of(frame: Frame | None) -> Line | None:
    return frame.line if frame is not None else None


def place(
    failure: Failure,
    knowledge: Knowledge,
    server_args: Mapping[str, Scalar] = EMPTY,
    engine: str | None = None,
    stack: Sequence[str] = (),
    ready: Line | None = None,
) -> Placement:
    """The site and phase of one failure, from its frames, texts, stage and clues."""
    c = failure.clues
    texts = _texts(failure)
    phase, rival = phases.decide(failure, knowledge, server_args, engine, stack, ready, texts)
    site = code_sites.site(failure.frames, knowledge, texts)
    frame = _frame_of(failure, site)
    if site is None and failure.stage and code.stage_role(failure.stage) == "encoder":
        site = Decision(
            "encoder",
            f"the failure is in the {failure.stage!r} stage, an encoder",
            failure.line,
            0.75,
        )
    if site is None:
        site = _site_from_checkpoints(failure, phase.value)
    if site.value in ("unknown", "forward"):
        fallback = _fallback(failure, phase.value)
        if fallback is not None:
            site, frame = fallback
    if site.value == "unknown":
        model = heuristics.model_frame(failure.frames)
        if model is not None:
            frame = model
            site = Decision("forward", f"{frame_name(model)} is model code", model.line, 0.5)
    if c.capture_failed is not None and failure.kind != "graph_capture_failed":
        site = Decision(
            "graph_capture",
            f"line {c.capture_failed.number} says the CUDA-graph capture failed",
            c.capture_failed,
            0.9,
        )
    return Placement(site, phase, frame, rival)


def _texts(failure: Failure) -> tuple[tuple[str, Line], ...]:
    """The failure's own line and the wrapper line that opened its traceback."""
    out = [(failure.line.text, failure.line)]
    if failure.opener is not None:
        out.append((failure.opener.text, failure.opener))
    return tuple(out)


def _frame_of(failure: Failure, site: Decision | None) -> Frame | None:
    if site is None or site.line is None:
        return None
    return next((f for f in failure.frames if f.line == site.line), None)


def _fallback(failure: Failure, phase: str) -> tuple[Decision, Frame | None] | None:
    """What names and operations say, for code no table knows (judge/heuristics.py)."""
    named = heuristics.encoder_frame(failure.frames)
    if named is not None:
        frame, why = named
        return Decision("encoder", why, frame.line or failure.line, 0.6), frame
    for frame in reversed(failure.frames):
        if code.name_heuristic(frame.path, frame.func, frame.code) == "encoder":
            why = f"{frame_name(frame)} names encoder code"
            return Decision("encoder", why, frame.line or failure.line, 0.6), frame
    making = heuristics.weights_frame(failure.frames)
    if making is not None and phase in ("startup", "unknown"):
        frame, why = making
        return Decision("weights", why, frame.line or failure.line, 0.6), frame
    return None


def _site_from_checkpoints(failure: Failure, phase: str) -> Decision:
    c = failure.clues
    unknown = Decision("unknown", "no frame, stage or startup step names where it failed")
    if failure.kind == "graph_capture_failed":
        return Decision("graph_capture", "the capture failure itself", failure.line, 1.0)
    if failure.kind not in OOM_KINDS:
        return unknown  # the startup step says where memory ran out, not where code broke
    if c.vllm:
        # vLLM has no SGLang checkpoints; its weight-loading bar still says what is running
        if c.progress == "load_progress":
            return Decision("weights", "the weight-loading bar was running", c.progress_line, 0.7)
        return unknown
    if phase != "startup":
        return unknown
    site = _CHECKPOINT_SITES.get(c.checkpoint or "")
    if site is None:
        return unknown
    return Decision(site, _CHECKPOINT_WORDS[c.checkpoint or ""], c.checkpoint_line, 0.7)
