"""What the launch had reached when a failure was printed, and the pipeline stage it ran in.

Assembly only observes: the lines around a failure (the ready line, the last startup checkpoint
of its rank, the last progress bar, a capture failure, requests being served) are recorded as its
`Clues`. Where and when it happened is decided later, in one place (oomdoctor/judge/place.py).
"""

from __future__ import annotations

from oomdoctor.incident.launch import Launch
from oomdoctor.incident.stages import line_stage
from oomdoctor.incident.tracebacks import Stream
from oomdoctor.model import Clues, Line

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
#: vLLM facts that show the engine was starting (an excerpt that begins mid-load).
VLLM_STARTUP_KINDS = ("vllm_weights", "vllm_profile", "vllm_mm_profile")


def observe(launch: Launch, stream: Stream, line: Line, opener: Line | None) -> Clues:
    """The launch's state as the failure on ``line`` was printed."""
    state = launch.rank_state(line)
    ready = launch.ready if launch.ready is not None and before(launch.ready, line) else None
    initialised = launch.initialised
    if initialised is not None and (initialised.seq >= line.seq or launch.loading_stage):
        initialised = None  # printed later, or a pipeline stage is still loading
    startup = None
    if state is not None and state.last_checkpoint_line is not None:
        startup = state.last_checkpoint_line
    elif launch.server_args_line is not None:
        startup = launch.server_args_line
    elif launch.started_loading:
        startup = next(
            (s.last_checkpoint_line for s in launch.ranks.values() if s.last_checkpoint_line),
            None,
        )
    if startup is None:
        startup = next(
            (launch.facts[k][0].line for k in VLLM_STARTUP_KINDS if launch.facts.get(k)), None
        )
    stats = launch.stats
    served = [
        f.line
        for f in (stats.last_prefill, stats.last_decode)
        if f is not None and f.line.seq < line.seq
    ]
    if stats.last_retraction is not None and stats.last_retraction.seq < line.seq:
        served.append(stats.last_retraction)
    served.extend(f.line for f in launch.facts.get("vllm_stats", ())[-1:] if f.line.seq < line.seq)
    return Clues(
        warmup=stream.warmup,
        ready=ready,
        initialised=initialised,
        startup=startup,
        vllm=any(k in launch.counts for k in VLLM_KINDS),
        checkpoint=state.last_checkpoint if state else None,
        checkpoint_line=state.last_checkpoint_line if state else None,
        progress=launch.progress,
        progress_line=launch.progress_line,
        capture_failed=stream.capture_failed,
        serving=max(served, key=lambda ln: ln.seq) if served else None,
        previous=opener or stream.last_line,
    )


def before(a: Line, b: Line) -> bool:
    """Whether line ``a`` was printed before line ``b``: their order in one source; across the
    files of one incident (the ranks' or nodes' logs) their timestamps, where both print one in
    the same form (else the order they were read in)."""
    if a.source == b.source or not a.ts or not b.ts or len(a.ts) != len(b.ts):
        return a.seq < b.seq
    return a.ts < b.ts


def stage_of(launch: Launch, line: Line, opener: Line | None) -> str | None:
    """The pipeline stage a failure happened in, from the lines themselves."""
    for candidate in (line, opener):
        stage = line_stage(candidate) if candidate is not None else None
        if stage:
            return stage
    return launch.loading_stage[0] if launch.loading_stage is not None else None
