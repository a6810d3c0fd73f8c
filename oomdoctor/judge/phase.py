"""When a failure happened: at startup, during the warm-up request, or while serving.

Every source that can tell gives a Decision with a strength; the strongest wins and the strongest
one that disagrees is kept as the runner-up (a report can say what would settle it). The sources:

- the failure itself: a kind that only exists at startup (1.0);
- its traceback: a frame or text with a phase mark (0.85), a constructor frame (0.7);
- its words and its wrapper's: "Failed to initialize ...", "... during initialization" (0.8);
- the launch when it was printed (its Clues): the ready line before it (0.9), initialisation
  complete (0.8), requests being served (0.75), weights that had just finished loading (0.75),
  a startup line with no ready line after it (0.6);
- the OOM message's own figures: PyTorch names the memory of CUDA-graph private pools whenever
  there is any, so a complete message without them says no graph had been captured yet, i.e. the
  startup before capture (0.45, unless graphs are disabled); with them, graphs were captured (0.3).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from oomdoctor.incident.place import before
from oomdoctor.judge import code_sites
from oomdoctor.judge.records import Decision, frame_name
from oomdoctor.knowledge import Knowledge
from oomdoctor.knowledge.kinds import STARTUP_KINDS
from oomdoctor.model import Failure, Line, Scalar

#: Words of a failure (or of the line that wrapped its traceback) that say it happened while
#: the server was starting: English, not an engine's list.
_STARTING = re.compile(
    r"(?i)\bfailed to (?:initiali[sz]e|start|load|launch|create)\b"
    r"|\b(?:during|at|in) (?:initiali[sz]ation|startup|start-up|init)\b"
    r"|\binit(?:iali[sz]ation)? (?:failed|error)\b|\bfailed (?:during|at) (?:start|init)"
)
#: Engine packages whose constructors run only while the server starts.
_ENGINE_ROOTS = ("sglang/", "vllm/", "vllm_omni/", "sglang_omni/", "vllm_ascend/")
#: A user's code line that builds an engine: `llm = LLM(...)`, `AsyncLLMEngine.from_engine_args`.
_BUILDS_ENGINE = re.compile(
    r"\b(?:LLM|LLMEngine|AsyncLLMEngine|AsyncLLM|Engine|Runtime)\(|\.from_engine_args\(|"
    r"\.from_vllm_config\(|\bEngine\.from_"
)
#: server_args that turn CUDA graphs off (then private pools say nothing about the phase).
_EAGER = (("disable_cuda_graph", True), ("enforce_eager", True))
#: What allocates through a pluggable memory pool (its tensors count as private-pool memory).
_POOLED = frozenset({"vllm-sleep-mode", "torch_memory_saver"})
#: CUDA graphs hold a small share of what the allocator holds; a pool holding more is not them.
POOL_SHARE = 0.5
#: Engines whose stages are separate processes (an encoder stage never captures graphs).
_PIPELINES = ("sglang-omni", "vllm-omni")


def decide(
    failure: Failure,
    knowledge: Knowledge,
    server_args: Mapping[str, Scalar],
    engine: str | None,
    stack: Sequence[str] = (),
    ready: Line | None = None,
    texts: Sequence[tuple[str, Line]] = (),
) -> tuple[Decision, Decision | None]:
    """The phase and, when a weaker source disagrees, the runner-up. ``ready`` is the
    incident's ready line: one read later (another file of the incident) can still come before
    the failure by the timestamps."""
    found = _sources(failure, knowledge, server_args, engine, stack)
    coded = code_sites.phase(failure.frames, knowledge, texts)
    if coded is not None and failure.kind not in STARTUP_KINDS:
        found.append(coded)
    c = failure.clues
    other_file = ready is not None and ready.source != failure.line.source
    if c.ready is None and ready is not None and other_file and before(ready, failure.line):
        found.append(
            Decision(
                "running",
                f"the ready line ({ready.ts}, another file) came before it ({failure.line.ts})",
                ready,
                0.85,
            )
        )
    if not found:
        return Decision("unknown", "nothing in the log says whether the server had started"), None
    found.sort(key=lambda d: -d.strength)
    best = found[0]
    rival = next((d for d in found[1:] if d.value != best.value), None)
    return best, rival


def _sources(
    failure: Failure,
    knowledge: Knowledge,
    server_args: Mapping[str, Scalar],
    engine: str | None,
    stack: Sequence[str],
) -> list[Decision]:
    out: list[Decision] = []
    c = failure.clues
    line = failure.line
    if failure.kind in STARTUP_KINDS:
        return [Decision("startup", "this failure exists only at startup", line, 1.0)]
    if c.warmup:
        out.append(Decision("warmup", "it happened inside the warm-up request", line, 0.9))
    ctor = _constructor(failure)
    if ctor is not None:
        out.append(ctor)
    for text, at in (
        (line.text, line),
        *(((failure.opener.text, failure.opener),) if failure.opener else ()),
    ):
        m = _STARTING.search(text)
        if m:
            out.append(Decision("startup", f"the words {m.group(0)!r} (line {at.number})", at, 0.8))
            break
    out.extend(_launch(failure))
    pools = _private_pools(failure, server_args, engine, stack)
    if pools is not None:
        out.append(pools)
    return out


def _constructor(failure: Failure) -> Decision | None:
    """A frame inside an engine's constructor, or a user's line that builds an engine."""
    for frame in reversed(failure.frames):
        path = frame.path.replace("\\", "/")
        if frame.func == "__init__" and any(root in path for root in _ENGINE_ROOTS):
            return Decision(
                "startup",
                f"{frame_name(frame)} is a constructor of the engine",
                frame.line,
                0.7,
            )
        if frame.code and _BUILDS_ENGINE.search(frame.code):
            return Decision(
                "startup",
                f"the traceback runs under {frame.code.strip()[:60]!r}: the engine was being built",
                frame.line,
                0.7,
            )
    return None


def _launch(failure: Failure) -> list[Decision]:
    """What the launch had reached when the failure was printed."""
    c = failure.clues
    out: list[Decision] = []
    if c.ready is not None:
        out.append(
            Decision("running", f"the ready line (line {c.ready.number}) came before", c.ready, 0.9)
        )
    elif c.initialised is not None:
        out.append(
            Decision(
                "running",
                f"initialisation had completed (line {c.initialised.number})",
                c.initialised,
                0.8,
            )
        )
    if c.serving is not None:
        out.append(
            Decision(
                "running", f"requests were being served (line {c.serving.number})", c.serving, 0.75
            )
        )
    if c.previous is not None and failure.line.number - c.previous.number <= 2:
        m = _STARTING.search(c.previous.text)
        if m:  # `EngineCore failed to start.` just above the error it reports
            out.append(
                Decision(
                    "startup",
                    f"the line before says {m.group(0)!r} (line {c.previous.number})",
                    c.previous,
                    0.75,
                )
            )
    loaded = _just_loaded(c.previous)
    if loaded is not None and c.ready is None:
        out.append(
            Decision(
                "startup",
                f"right after the weights finished loading (line {loaded.number})",
                loaded,
                0.75,
            )
        )
    if c.startup is not None and c.ready is None and c.initialised is None:
        out.append(
            Decision(
                "startup",
                f"the startup (line {c.startup.number}) had not reached a ready line",
                c.startup,
                0.6,
            )
        )
    return out


#: A line that says weight loading has just finished (a loading bar at 100%, a loader's summary).
_LOADED = re.compile(
    r"(?i)load\w*[^|:]{0,40}(?:shards|checkpoint|weights?)[^|:]{0,20}: +100%"
    r"|Load weight end|Loading weights took|Model loading took"
)


def _just_loaded(previous: Line | None) -> Line | None:
    if previous is not None and _LOADED.search(previous.text):
        return previous
    return None


def _private_pools(
    failure: Failure, server_args: Mapping[str, Scalar], engine: str | None, stack: Sequence[str]
) -> Decision | None:
    """PyTorch's message names private-pool memory whenever the process has any. CUDA graphs
    live in one once captured; so do the tensors of a pluggable allocator's pool (vLLM's sleep
    mode, torch_memory_saver), which then say nothing about graphs."""
    oom = failure.oom
    if oom is None or oom.form != "pytorch" or engine in _PIPELINES:
        return None
    if any(server_args.get(key) is value for key, value in _EAGER):
        return None
    if set(stack) & _POOLED or failure.data.get("pool"):
        return None
    pools, allocated = oom.private_pools_gib, oom.allocated_gib
    if pools is not None and allocated and pools > POOL_SHARE * allocated:
        return None  # graphs take a small share; this much is a memory pool (weights in it)
    if oom.private_pools_gib is not None and oom.private_pools_gib > 0:
        return Decision(
            "running",
            f"CUDA graphs were captured ({oom.private_pools_gib:.2f} GiB in private pools)",
            failure.line,
            0.3,
        )
    if oom.private_pools_gib is None and oom.complete and oom.allocated_gib is not None:
        return Decision(
            "startup",
            "no CUDA graph captured yet: the message names no private-pool memory, as PyTorch "
            "does whenever a graph holds some",
            failure.line,
            0.45,
        )
    return None


def strongest(decisions: Sequence[Decision]) -> Decision | None:
    return max(decisions, key=lambda d: d.strength, default=None)
