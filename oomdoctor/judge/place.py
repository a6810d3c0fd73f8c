"""Where and when a failure happened: its site and its phase, each a Decision with the line
and the reasoning that settled it.

The sources, strongest first. Phase: a failure kind that only exists at startup; a frame or
text with a phase mark (knowledge/sites.toml); the launch's state when it was printed (its
Clues: the ready line before it, the startup lines before it). Site: the frames' and texts'
site marks, the pipeline stage, else the startup step the failure interrupted.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.judge import sites
from oomdoctor.judge.records import Decision
from oomdoctor.knowledge import Knowledge
from oomdoctor.knowledge.kinds import OOM_KINDS, STARTUP_KINDS
from oomdoctor.model import Clues, Failure, Frame, Line

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


def _line_of(frame: Frame | None) -> Line | None:
    return frame.line if frame is not None else None


def place(failure: Failure, knowledge: Knowledge) -> Placement:
    """The site and phase of one failure, from its frames, texts, stage and clues."""
    c = failure.clues
    opener = failure.opener
    texts = [failure.line.text] + ([opener.text] if opener is not None else [])
    stages = [failure.stage] if failure.stage else []
    site_name, frame = sites.classify(failure.frames, knowledge, texts, stages)
    phase = _phase(failure, knowledge, texts)
    if site_name != "unknown":
        where = (
            f"frame {frame.path}:{frame.lineno} in {frame.func}"
            if frame is not None
            else "the failure's own text"
        )
        site = Decision(site_name, f"{where} is {site_name} code", _line_of(frame) or failure.line)
    else:
        site = _site_from_checkpoints(failure, phase.value)
    if c.capture_failed is not None and failure.kind != "graph_capture_failed":
        site = Decision(
            "graph_capture",
            f"line {c.capture_failed.number} says the CUDA-graph capture failed",
            c.capture_failed,
        )
    return Placement(site, phase, frame)


def _phase(failure: Failure, knowledge: Knowledge, texts: list[str]) -> Decision:
    c = failure.clues
    if failure.kind in STARTUP_KINDS:
        return Decision("startup", "this failure exists only at startup", failure.line, 1.0)
    if c.warmup:
        return Decision("warmup", "inside the warm-up request", failure.line, 0.9)
    marked = sites.phase_of(failure.frames, knowledge, texts)
    if marked is not None:
        return Decision(marked, f"a frame or line of the traceback is {marked} code", None, 0.8)
    return launch_phase(c)


def launch_phase(c: Clues) -> Decision:
    """The phase from where the launch had got to when the failure was printed."""
    if c.ready is not None:
        return Decision("running", f"the ready line (line {c.ready.number}) came before", c.ready)
    # The scheduler prints its summary line when initialisation is complete (Omni: the stage's
    # "started" line); an offline Engine (RL rollouts) never prints a ready line.
    if c.initialised is not None:
        return Decision(
            "running",
            f"initialisation had completed (line {c.initialised.number})",
            c.initialised,
        )
    if c.startup is not None:
        return Decision(
            "startup",
            f"the startup (line {c.startup.number}) had not reached the ready line",
            c.startup,
        )
    return Decision("unknown", "nothing in the log says whether the server had started")


def _site_from_checkpoints(failure: Failure, phase: str) -> Decision:
    c = failure.clues
    unknown = Decision("unknown", "no frame, stage or startup step names where it failed")
    if failure.kind == "graph_capture_failed":
        return Decision("graph_capture", "the capture failure itself", failure.line)
    if failure.kind not in OOM_KINDS:
        return unknown  # the startup step says where memory ran out, not where code broke
    if c.vllm:
        # vLLM has no SGLang checkpoints; its weight-loading bar still says what is running
        if c.progress == "load_progress":
            return Decision("weights", "the weight-loading bar was running", c.progress_line)
        return unknown
    if phase != "startup":
        return unknown
    site = _CHECKPOINT_SITES.get(c.checkpoint or "")
    if site is None:
        return unknown
    return Decision(site, _CHECKPOINT_WORDS[c.checkpoint or ""], c.checkpoint_line)
