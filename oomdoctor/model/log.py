"""What a log says, line by line: lines, facts, frames, OOM messages, failures, checkpoints.

No ``from __future__ import annotations`` here: typing.NamedTuple compiles every field annotation
given as a string (a ForwardRef), which made defining these records take twice as long.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

Scalar = str | int | float | bool | None
#: The shared empty default of mapping fields (read-only, so sharing it is safe).
EMPTY: Mapping[str, Any] = MappingProxyType({})

CATEGORIES: tuple[str, ...] = (
    "startup_kv_alloc",
    "runtime_activation",
    "cotenant_pressure",
    "encoder_starvation",
    "not_oom",
    "unknown",
)
#: Categories that mean "GPU memory really ran out" (exit code 1).
OOM_CATEGORIES: frozenset[str] = frozenset(CATEGORIES[:4])


class Line(NamedTuple):
    """One physical log line (or one ``\\r`` segment of it) after its envelope was stripped."""

    source: int  # index into Incident.sources
    number: int  # 1-based line number in that source, as an editor shows it
    seq: int  # global order across all sources
    text: str  # the message, envelope removed
    raw: str  # the line as read (decoded), for evidence
    rank: str | None = None  # SGLang rank tag as printed, e.g. "TP0", "DP0 TP0", "DP-1 TP0"
    ts: str | None = None  # "YYYY-mm-dd HH:MM:SS[.mmm]" or another printed timestamp
    actor_pid: int | None = None  # Ray / worker prefix pid, e.g. "(WorkerDict pid=12504)"
    level: str | None = None  # log level where the envelope prints one (Omni, vLLM)
    style: str | None = None  # the logger envelope (normalise), None for bare lines
    actor: str | None = None  # the process name of a `(Name pid=N)` prefix
    logger: str | None = None  # the logger name where the envelope prints one (Omni)


def number(value: object) -> float | None:
    """A logged value as a number, or None (a log can print anything where a number goes;
    True is not 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class Fact(NamedTuple):
    """A typed observation made by one signature on one line."""

    kind: str
    line: Line
    data: Mapping[str, Scalar] = EMPTY

    def num(self, key: str) -> float | None:
        return number(self.data.get(key))

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else None


class Frame(NamedTuple):
    path: str
    lineno: int  # the line in the Python file
    func: str
    line: Line | None = None  # the log line that printed this frame
    code: str = ""  # the source line the traceback printed under it, where it was kept


class Holder(NamedTuple):
    """A process the CUDA OOM message says holds memory on the failing GPU."""

    pid: int | None  # None for PyTorch's "this process"
    gib: float
    role: Literal["self", "foreign", "sibling", "peer"]  # how oomdoctor judged it
    why: str


class OomMessage(NamedTuple):
    """The numbers of a GPU out-of-memory message (PyTorch allocator or a driver-level error)."""

    form: str  # "pytorch", "pytorch_legacy", "cuda_error", "cublas", "nccl", "triton"
    requested_gib: float | None = None
    gpu: int | None = None
    total_gib: float | None = None
    free_gib: float | None = None
    this_process_gib: float | None = None
    processes: tuple[tuple[int, float], ...] = ()  # (pid, GiB) of "Process N has M" clauses
    allowed_gib: float | None = None
    allocated_gib: float | None = None
    private_pools_gib: float | None = None
    reserved_unallocated_gib: float | None = None
    reserved_total_gib: float | None = None  # legacy form only
    complete: bool = True  # False when the message was cut off before its numbers ended


class Clues(NamedTuple):
    """What the launch had reached when a failure was printed (observed lines, not decisions)."""

    warmup: bool = False  # the failure is inside SGLang's warm-up request
    ready: Line | None = None  # the server's ready line, printed before the failure
    initialised: Line | None = (
        None  # scheduler summary / vLLM init line before it (no stage loading)
    )
    startup: Line | None = None  # a line of the startup before it (server_args, a checkpoint)
    vllm: bool = False  # vLLM-only facts came before it (SGLang's checkpoints cannot place it)
    checkpoint: str | None = None  # the failure rank's last startup checkpoint kind
    checkpoint_line: Line | None = None
    progress: str | None = None  # the last startup progress bar (load_progress, capture_progress)
    progress_line: Line | None = None
    capture_failed: Line | None = None  # a capture failure on the failure's stream
    serving: Line | None = None  # a stats or retraction line before it: requests were served
    previous: Line | None = None  # the line of its stream just before it (or before its traceback)


class Failure(NamedTuple):
    """One failure event (deduplicated across ranks that printed the same thing)."""

    kind: str  # "cuda_oom", "startup_kv", "logical_kv", "tp_imbalance", "graph_capture", ...
    line: Line
    message: str
    ranks: tuple[str, ...] = ()
    frames: tuple[Frame, ...] = ()
    oom: OomMessage | None = None
    site: str = "unknown"  # where it failed: weights, kv_pool, graph_capture, encoder, logits, ...
    phase: str = "unknown"  # startup, warmup, running, unknown
    data: Mapping[str, Scalar] = EMPTY
    site_frame: Frame | None = None  # the frame that placed it (evidence)
    opener: Line | None = None  # the wrapper line that introduced its traceback
    stage: str | None = None  # the pipeline stage it happened in (SGLang Omni, vLLM-Omni)
    clues: Clues = Clues()  # what the launch had reached when it was printed


class Measured(NamedTuple):
    """A number read from the log, with the line that printed it."""

    value: float
    line: Line


class RankMemory(NamedTuple):
    """The startup memory checkpoints one rank printed (GiB; None where not printed)."""

    rank: str
    pre: Measured | None = None  # Load weight begin. avail mem
    post: Measured | None = None  # Load weight end. avail mem
    weights: Measured | None = None  # Load weight end. mem usage
    kv_logged: Measured | None = None  # KV Cache is allocated: K+V or KV size
    kv_tokens: Measured | None = None
    pool_end: Measured | None = None  # Memory pool end. avail mem
    graph_begin: Measured | None = None
    graph_mem: Measured | None = None  # Capture ... graph end. mem usage
    graph_end: Measured | None = None  # Capture ... graph end. avail mem
    stage: str | None = None  # a pipeline stage's own checkpoints (SGLang Omni)
    gpu: int | None = None  # the GPU that stage runs on
    fraction: float | None = None  # the mem_fraction_static that stage's own line printed
    omni_kv: Measured | None = None  # Omni's own KV budget for the stage (available_for_kv)
