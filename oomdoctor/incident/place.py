"""Where and when a failure happened: its site (from its frames and texts with the knowledge
tables' site marks, else the startup checkpoint it interrupted), its phase, and its pipeline stage.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.incident import sites
from oomdoctor.incident.launch import FailureBuilder, Launch
from oomdoctor.incident.stages import line_stage
from oomdoctor.incident.tracebacks import Stream
from oomdoctor.knowledge import Knowledge
from oomdoctor.knowledge.kinds import OOM_KINDS, STARTUP_KINDS
from oomdoctor.model import Frame, Line

#: Facts only vLLM prints: one of them means SGLang's checkpoints cannot place a failure.
VLLM_KINDS = (
    "vllm_config",
    "vllm_weights",
    "vllm_profile",
    "vllm_kv",
    "vllm_graph",
    "vllm_mm_profile",
    "vllm_ready",
    "startup_free_memory",
    "profiling_free_changed",
)
#: The SGLang startup step a failure interrupted, by the last checkpoint its rank printed.
_CHECKPOINT_SITES = MappingProxyType(
    {"load_begin": "weights", "load_end": "kv_pool", "graph_begin": "graph_capture"}
)


class Placed(NamedTuple):
    site: str
    frame: Frame | None  # the frame that placed it (evidence)
    phase: str


def place(
    knowledge: Knowledge,
    launch: Launch,
    stream: Stream,
    kind: str,
    line: Line,
    frames: tuple[Frame, ...],
    opener: Line | None,
    stage: str | None,
) -> Placed:
    """Site (and the frame that says so) and phase of a failure."""
    texts = [line.text] + ([opener.text] if opener is not None else [])
    site, frame = sites.classify(frames, knowledge, texts, [stage] if stage else [])
    if kind in STARTUP_KINDS:
        phase = "startup"
    elif stream.warmup:
        phase = "warmup"
    else:
        marked = sites.phase_of(frames, knowledge, texts)
        phase = marked or launch_phase(launch, stream, line)
    if site == "unknown":
        site = _site_from_checkpoints(launch, kind, line, phase)
    if stream.capture_failed and kind != "graph_capture_failed":
        site = "graph_capture"
    return Placed(site, frame, phase)


def refine(
    knowledge: Knowledge, builder: FailureBuilder, frames: tuple[Frame, ...], opener: Line | None
) -> None:
    """Frames found after the failure line (the same message repeated at the end of its
    traceback, or a message pasted before its frames) place it."""
    builder.frames = frames
    builder.opener = builder.opener or opener
    texts = [builder.line.text] + ([opener.text] if opener is not None else [])
    stages = [builder.stage] if builder.stage else []
    site, frame = sites.classify(frames, knowledge, texts, stages)
    if site != "unknown" and builder.site in ("unknown", "forward"):
        builder.site, builder.site_frame = site, frame
    marked = sites.phase_of(frames, knowledge, texts)
    if marked is not None and builder.kind not in STARTUP_KINDS:
        builder.phase = marked


def launch_phase(launch: Launch, stream: Stream, line: Line) -> str:
    """The phase from where the launch had got to when the line was printed."""
    if stream.warmup:
        return "warmup"
    if launch.ready is not None and launch.ready.seq < line.seq:
        return "running"
    # The scheduler prints its summary line when initialisation is complete (Omni: the
    # stage's "started" line); an offline Engine (RL rollouts) never prints a ready line.
    if (
        launch.initialised is not None
        and launch.initialised.seq < line.seq
        and launch.loading_stage is None
    ):
        return "running"
    if launch.started_loading or launch.server_args_line is not None:
        return "startup"
    if any(k in launch.counts for k in ("vllm_weights", "vllm_profile", "vllm_mm_profile")):
        return "startup"  # a vLLM excerpt that starts in the middle of loading
    return "unknown"


def _site_from_checkpoints(launch: Launch, kind: str, line: Line, phase: str) -> str:
    if kind == "graph_capture_failed":
        return "graph_capture"
    if kind not in OOM_KINDS:
        return "unknown"  # the startup step says where memory ran out, not where code broke
    if any(k in launch.counts for k in VLLM_KINDS):
        # vLLM has no SGLang checkpoints; its weight-loading bar still says what is running
        return "weights" if launch.progress == "load_progress" else "unknown"
    if phase != "startup":
        return "unknown"
    state = launch.rank_state(line)
    last = state.last_checkpoint if state else None
    return _CHECKPOINT_SITES.get(last or "", "unknown")


def stage_of(launch: Launch, line: Line, opener: Line | None) -> str | None:
    """The pipeline stage a failure happened in, from the lines themselves."""
    for candidate in (line, opener):
        stage = line_stage(candidate) if candidate is not None else None
        if stage:
            return stage
    return launch.loading_stage[0] if launch.loading_stage is not None else None
