"""Where and when a failure happened: its site and its phase, each a Decision with the line
and the reasoning that settled it.

The sources, strongest first. Phase: a failure kind that only exists at startup; a frame or
text with a phase mark (knowledge/sites.toml); the launch's state when it was printed (its
Clues: the ready line before it, the startup lines before it). Site: the frames' and texts'
site marks, the pipeline stage, else the startup step the failure interrupted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.judge import heuristics, sites
from oomdoctor.judge import phase as phases
from oomdoctor.judge.records import Decision, frame_name
from oomdoctor.knowledge import Knowledge
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
    opener = failure.opener
    texts = [failure.line.text] + ([opener.text] if opener is not None else [])
    stages = [failure.stage] if failure.stage else []
    site_name, frame = sites.classify(failure.frames, knowledge, texts, stages)
    phase, rival = phases.decide(failure, knowledge, server_args, engine, stack, ready)
    if site_name != "unknown":
        where = (
            f"{frame_name(frame)} is {site_name} code"
            if frame is not None
            else f"the failure's own text or stage names {site_name} work"
        )
        site = Decision(site_name, where, _line_of(frame) or failure.line, 0.85)
    else:
        site = _site_from_checkpoints(failure, phase.value)
    if site.value in ("unknown", "forward"):
        named = heuristics.encoder_frame(failure.frames)
        making = heuristics.weights_frame(failure.frames)
        if named is not None:
            frame, why = named
            site = Decision("encoder", why, frame.line or failure.line, 0.6)
        elif making is not None and phase.value in ("startup", "unknown"):
            frame, why = making
            site = Decision("weights", why, frame.line or failure.line, 0.6)
    if c.capture_failed is not None and failure.kind != "graph_capture_failed":
        site = Decision(
            "graph_capture",
            f"line {c.capture_failed.number} says the CUDA-graph capture failed",
            c.capture_failed,
            0.9,
        )
    return Placement(site, phase, frame, rival)


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
