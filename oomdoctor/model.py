"""The values that flow between the pipeline's stages.

read → normalise → extract facts → assemble the incident → budget → rules → verdict → render.
Every stage takes and returns these immutable records; none of them does I/O.
They are NamedTuples rather than frozen dataclasses because a command-line tool pays for class
creation on every start (a dataclass costs ~0.5 ms to define on Python 3.11, a NamedTuple ~0.1).
Change them with ``record._replace(field=value)``; never rely on their tuple-ness (order,
unpacking, equality across types).

No ``from __future__ import annotations`` here: typing.NamedTuple compiles every field annotation
given as a string (a ForwardRef), which made defining these records take twice as long.
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, TypeAlias

_TP_RANK = re.compile(r"\bTP(\d+)\b")

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


class VersionGuess(NamedTuple):
    """The SGLang release range whose formats the log matches."""

    low: str | None
    high: str | None
    evidence: tuple[Line, ...] = ()

    @property
    def label(self) -> str | None:
        if self.low is None and self.high is None:
            return None
        if self.low == self.high:
            return self.low
        if self.high is None:
            return f">={self.low}"
        if self.low is None:
            return f"<={self.high}"
        return f"{self.low}–{self.high}"


class Point(NamedTuple):
    start: str  # timestamp of the first stats line in the bucket
    usage: float  # the highest token usage in the bucket
    running: int
    queued: int
    retractions: int


class Timeline(NamedTuple):
    points: tuple[Point, ...] = ()
    first_ts: str | None = None
    last_ts: str | None = None
    span_s: float | None = None
    seconds_high: float = 0.0  # time with token usage ≥ HIGH_USAGE
    peak_usage: float | None = None
    retractions: int = 0

    @property
    def minutes_high(self) -> float:
        """Minutes at token usage ≥ HIGH_USAGE, to 0.1."""
        return round(self.seconds_high / 60, 1)

    @property
    def span_minutes(self) -> float | None:
        return None if self.span_s is None else round(self.span_s / 60, 1)

    @property
    def retractions_per_hour(self) -> float | None:
        if not self.span_s or self.span_s < 600 or not self.retractions:
            return None
        return self.retractions / (self.span_s / 3600)


class StatsSummary(NamedTuple):
    """What the periodic Prefill/Decode batch lines say (bounded: counts, peaks, the last ones)."""

    prefill_lines: int = 0
    decode_lines: int = 0
    peak_token_usage: float | None = None
    last_prefill: Fact | None = None
    last_decode: Fact | None = None
    retractions: int = 0
    retracted_requests: int = 0
    first_retraction: Line | None = None
    last_retraction: Line | None = None
    timeline: Timeline = Timeline()
    retraction_rate: float | None = None  # per hour, first to last retraction
    #: requests preempted: vLLM V0 warns on the 1st and every 50th with the running total, so
    #: the largest total it printed, else the warnings counted
    preempted: int = 0


class Incident(NamedTuple):
    """Everything the log says, assembled: the input to the budget and the rules."""

    sources: tuple[str, ...]
    lines_read: int
    engine: str | None
    version: VersionGuess
    server_args: Mapping[str, Scalar]
    server_args_line: Line | None
    ranks: tuple[RankMemory, ...]
    summary: Fact | None  # max_total_num_tokens=... line
    ready: Line | None
    failures: tuple[Failure, ...]
    facts: tuple[Fact, ...]  # every evidence-bearing fact (bounded per kind)
    fact_counts: Mapping[str, int]
    stats: StatsSummary
    notices: tuple[str, ...] = ()
    last_ts: str | None = None  # the latest timestamp among the lines read
    stack: tuple[str, ...] = ()  # what runs around the engine (verl, torch_memory_saver, ray...)
    engine_why: str | None = None  # what told the engine, in words
    engine_evidence: tuple[Line, ...] = ()
    engine_rival: str | None = None  # the other engine family, when it had strong evidence too
    actor_roles: Mapping[int, str] = MappingProxyType({})  # `(Name pid=N)` pid → engine | driver
    primary: Failure | None = None  # the failure diagnosed (incident.primary: the best tier's)

    @property
    def tp_size(self) -> int | None:
        """--tp-size from server_args, else the number of TP ranks that printed lines."""
        tp = self.server_args.get("tp_size")
        if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0:
            return tp
        seen = {int(n) for r in self.ranks for n in _TP_RANK.findall(r.rank)}
        seen |= {int(n) for f in self.failures for r in f.ranks for n in _TP_RANK.findall(r)}
        return max(seen) + 1 if seen else None

    def facts_of(self, kind: str) -> tuple[Fact, ...]:
        return tuple(f for f in self.facts if f.kind == kind)

    def first(self, kind: str) -> Fact | None:
        for f in self.facts:
            if f.kind == kind:
                return f
        return None


class RankBudget(NamedTuple):
    rank: str
    pre_gib: float | None
    post_gib: float | None
    weights_gib: float | None
    kv_gib: float | None
    stage: str | None = None  # a pipeline stage's own budget (SGLang Omni)
    gpu: int | None = None
    mem_fraction_static: float | None = None  # that stage's own y
    kv_logged_gib: float | None = None


class Window(NamedTuple):
    """The workable range of an engine's memory fraction (SGLang's y, vLLM's u), with why.

    Below ``low`` the KV cache is too small; above ``high`` too little is left for the runtime.
    """

    low: float | None = None
    low_basis: str | None = None
    high: float | None = None
    high_basis: str | None = None

    @property
    def empty(self) -> bool | None:
        """No fraction satisfies both ends (None: an end is unknown)."""
        if self.low is None or self.high is None:
            return None
        return self.low > self.high


class SglangBudget(NamedTuple):
    """SGLang's budget of DESIGN §2: y of the memory free before loading holds weights and the
    KV pool (GiB; None = the log does not say). The window is on y (--mem-fraction-static)."""

    rank: str | None = None  # the tightest rank, whose numbers these are
    stage: str | None = None  # the pipeline stage whose budget this is (SGLang Omni)
    gpu: int | None = None  # that stage's GPU
    pre_gib: float | None = None
    post_gib: float | None = None
    weights_gib: float | None = None
    mem_fraction_static: float | None = None
    mem_fraction_source: str | None = None
    static_gib: float | None = None
    dynamic_gib: float | None = None
    kv_gib: float | None = None  # computed: post − (1 − y)·pre
    kv_logged_gib: float | None = None
    kv_tokens: int | None = None
    bytes_per_token: int | None = None
    context_len: int | None = None
    graph_gib: float | None = None
    headroom_gib: float | None = None  # free after pool and graphs (runtime headroom)
    capacity_gib: float | None = None
    y_zero: float | None = None  # the fraction at which the KV pool is exactly empty
    window: Window = Window()
    reserve_gib: float | None = None
    ranks: tuple[RankBudget, ...] = ()
    notices: tuple[str, ...] = ()
    weights_share: float | None = None  # weights / pre
    kv_reserve_gib: float = 0.0  # 0.5.23: set aside from the KV budget for multimodal buffers
    fraction_factor: float = 1.0  # SGLang multiplies the flag by this (0.3.6/0.4.6 VLMs, aiter)
    fraction_factor_why: str | None = None

    @property
    def engine(self) -> str:
        return "sglang"


class VllmBudget(NamedTuple):
    """vLLM's budget: a share u of TOTAL memory holds weights, activations and the KV cache
    together (GiB; None = the log does not say). The window is on u (--gpu-memory-utilization)."""

    gpu_memory_utilization: float | None = None
    utilization_source: str | None = None
    capacity_gib: float | None = None
    budget_gib: float | None = None  # total × u
    weights_gib: float | None = None
    activation_gib: float | None = None  # PyTorch activation peak of the profile run
    non_torch_gib: float | None = None
    kv_gib: float | None = None
    kv_tokens: int | None = None
    bytes_per_token: int | None = None
    max_model_len: int | None = None
    kv_needed_gib: float | None = None  # KV for one request of max_model_len
    startup_short_gib: float | None = None  # the start-up check: requested − free
    graph_gib: float | None = None
    window: Window = Window()
    notices: tuple[str, ...] = ()

    @property
    def engine(self) -> str:
        return "vllm"


#: The budget of whichever engine printed the log.
Budget: TypeAlias = SglangBudget | VllmBudget


class Action(NamedTuple):
    """One thing to change; flag actions carry the current and the computed value."""

    text: str
    flag: str | None = None
    direction: Literal["raise", "lower", "set"] | None = None
    value: Scalar = None
    current: Scalar = None
    basis: str | None = None  # the arithmetic behind the value, shown in reports
    #: an "Or ..." instead of the actions before it: its flags are not part of the change
    alternative: bool = False


class Verdict(NamedTuple):
    category: str
    confidence: float
    summary: str
    rule: str | None = None
    explanation: Mapping[str, str] = EMPTY  # what/why/remedy from the rule
