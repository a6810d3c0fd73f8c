"""Assemble facts into an incident: launches, per-rank (and per-stage) checkpoints, tracebacks,
failures, and the engine that printed it all.

State is bounded: per-kind fact lists are capped, stats lines are summarised as they pass, and a
log with several launches keeps only the launch that failed last (or the last one). Nothing here
depends on having seen the startup: an excerpt that starts mid-traceback is read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from oomdoctor.extract import pytorch_oom
from oomdoctor.extract.signatures.startup import parse_pairs, parse_server_args
from oomdoctor.incident import sites
from oomdoctor.incident.detect import Detector
from oomdoctor.incident.primary import primary_failure
from oomdoctor.incident.stages import line_stage
from oomdoctor.incident.timeline import TimelineBuilder
from oomdoctor.incident.tracebacks import Stream
from oomdoctor.incident.versions import VersionTracker
from oomdoctor.knowledge import Knowledge, builtin
from oomdoctor.knowledge.kinds import (
    BARE_OOM_FORMS,
    CONSEQUENCE_KINDS,
    FAILURE_KINDS,
    MEMORY_KINDS,
    OOM_KINDS,
    STARTUP_KINDS,
)
from oomdoctor.model import (
    Fact,
    Failure,
    Frame,
    Incident,
    Line,
    Measured,
    OomMessage,
    RankMemory,
    Scalar,
    StatsSummary,
)
from oomdoctor.read.scan import StatsBlock

MAX_FACTS_PER_KIND = 40
MAX_FAILURES = 200
OOM_CONTINUATION_LINES = 8

_DIGITS = re.compile(r"\d+(?:\.\d+)?")


@dataclass
class _RankState:
    rank: str
    values: dict[str, Measured] = field(default_factory=dict)
    last_checkpoint: str | None = None
    stage: str | None = None
    gpu: int | None = None
    fraction: float | None = None


@dataclass
class FailureBuilder:
    kind: str
    line: Line
    message: str
    ranks: list[str]
    frames: tuple[Frame, ...]
    site: str
    phase: str
    oom: OomMessage | None = None
    data: dict[str, Scalar] = field(default_factory=dict)
    site_frame: Frame | None = None
    opener: Line | None = None
    stage: str | None = None

    def freeze(self) -> Failure:
        return Failure(
            kind=self.kind,
            line=self.line,
            message=self.message,
            ranks=tuple(self.ranks),
            frames=self.frames,
            oom=self.oom,
            site=self.site,
            phase=self.phase,
            data=dict(self.data),
            site_frame=self.site_frame,
            opener=self.opener,
            stage=self.stage,
        )


@dataclass
class _StatsAcc:
    """The stats summary while lines stream past (frozen into StatsSummary at the end)."""

    prefill_lines: int = 0
    decode_lines: int = 0
    peak_token_usage: float | None = None
    last_prefill: Fact | None = None
    last_decode: Fact | None = None
    retractions: int = 0
    retracted_requests: int = 0
    first_retraction: Line | None = None
    last_retraction: Line | None = None
    timeline: TimelineBuilder = field(default_factory=TimelineBuilder)

    def freeze(self) -> StatsSummary:
        return StatsSummary(
            prefill_lines=self.prefill_lines,
            decode_lines=self.decode_lines,
            peak_token_usage=self.peak_token_usage,
            last_prefill=self.last_prefill,
            last_decode=self.last_decode,
            retractions=self.retractions,
            retracted_requests=self.retracted_requests,
            first_retraction=self.first_retraction,
            last_retraction=self.last_retraction,
            timeline=self.timeline.build(),
        )


@dataclass
class _Launch:
    """Everything about one start of the server (a log can hold several)."""

    server_args: dict[str, Scalar] = field(default_factory=dict)
    server_args_line: Line | None = None
    ranks: dict[str, _RankState] = field(default_factory=dict)
    summary: Fact | None = None
    initialised: Line | None = None  # scheduler summary line, or Omni's sglang_ar_started
    ready: Line | None = None
    failures: dict[tuple[str, str], FailureBuilder] = field(default_factory=dict)
    facts: dict[str, list[Fact]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: _StatsAcc = field(default_factory=lambda: _StatsAcc())
    loading_stage: tuple[str, int | None, float | None] | None = None  # Omni: who loads now
    progress: str | None = None  # the last startup progress bar (load_progress, capture_progress)

    @property
    def started_loading(self) -> bool:
        return any(r.values or r.last_checkpoint for r in self.ranks.values())


class Assembler:
    """Consumes ``(line, facts)`` pairs in log order; ``incident()`` freezes the result."""

    def __init__(self, sources: Iterable[str], knowledge: Knowledge | None = None) -> None:
        self.sources = tuple(sources)
        self.knowledge = knowledge or builtin()
        self.lines_read = 0
        self.last_ts: str | None = None
        self._launch = _Launch()
        self._failed_launch: _Launch | None = None
        self._launches = 1
        self._streams: dict[tuple[int, int | None], Stream] = {}
        self._versions = VersionTracker()
        self._stats_versions_seen: set[str] = set()
        self._notices: list[str] = []
        self._detector = Detector(self.knowledge)
        self._last_cumem: FailureBuilder | None = None
        self._handlers = self._make_handlers()

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, line: Line, facts: list[Fact]) -> None:
        kinds = {f.kind for f in facts}
        if line.ts and len(line.ts) >= 19:  # a full date, not vLLM's month-day form
            self.last_ts = line.ts
        if kinds == {"stats"}:
            head = line.text[:15]
            if head not in self._stats_versions_seen:  # one look per format is enough
                self._stats_versions_seen.add(head)
                self._versions.observe(line)
        else:
            self._versions.observe(line)
            self._detector.line(line, "marker" in kinds)
        stream = self._streams.setdefault((line.source, line.actor_pid), Stream())
        if stream.open_oom is None and line.actor_pid is None and line.style is None:
            # A bare line right after a prefixed OOM message is its re-wrapped continuation.
            stream = self._wrapping_stream(line) or stream
        if (
            "frame" not in kinds
            and line.number == stream.frame_line + 1
            and line.text[:1].isspace()
        ):
            # The source line a traceback prints under its frame: `raise ValueError("No
            # available memory ...")` repeats the message's words but is code, not a message.
            stream.add_code(line.text.strip())
            return
        if "graph_capture_failed" in kinds:
            stream.capture_failed = True  # an OOM on this very line happened during capture
        if stream.open_oom is not None and "oom_part" in kinds and not kinds & FAILURE_KINDS:
            self._continue_oom(stream, line)
            return
        if stream.open_oom is not None:
            self._close_oom(stream)
        # The exception line closes its traceback: failures on the same line must see the frames.
        for fact in sorted(facts, key=lambda f: f.kind == "exception"):
            self._fact(stream, fact, kinds)
        if "frame" not in kinds:
            stream.last_line = line

    def _wrapping_stream(self, line: Line) -> Stream | None:
        for (source, _), other in self._streams.items():
            if (
                source == line.source
                and other.open_oom is not None
                and 0 < line.number - other.open_oom_line <= 2
            ):
                return other
        return None

    def _keep(self, fact: Fact) -> None:
        launch = self._launch
        launch.counts[fact.kind] = launch.counts.get(fact.kind, 0) + 1
        kept = launch.facts.setdefault(fact.kind, [])
        if len(kept) < MAX_FACTS_PER_KIND:
            kept.append(fact)
        else:  # keep the first ones and the latest one
            kept[-1] = fact

    def _fact(self, stream: Stream, fact: Fact, kinds: set[str]) -> None:
        kind = fact.kind
        if kind == "server_args":
            self._server_args(fact)
            return
        if kind in ("oom_part", "stats", "marker"):
            if kind == "stats":
                self._stats(fact)
            return
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(stream, fact)
        elif kind == "exception":
            if not (kinds & FAILURE_KINDS):
                self._failure(stream, fact, "exception")
            self._end_traceback(stream)
        elif kind in FAILURE_KINDS and not _redundant(kind, kinds):
            self._failure(stream, fact, kind)
        if kind != "frame":
            self._keep(fact)

    def _make_handlers(self) -> dict[str, Callable[[Stream, Fact], None]]:
        return {
            "load_begin": self._checkpoint,
            "load_end": self._checkpoint,
            "kv_allocated": self._checkpoint,
            "pool_end": self._checkpoint,
            "graph_begin": self._checkpoint,
            "graph_end": self._checkpoint,
            "load_progress": self._progress,
            "capture_progress": self._progress,
            "summary": self._summary,
            "omni_stage": self._omni_stage,
            "ready": self._ready,
            "retraction": self._retraction,
            "traceback_start": self._traceback_start,
            "frame": self._frame,
            "warmup_failed": self._warmup,
            "logical_kv_detail": self._logical_detail,
            "tp_imbalance_detail": self._imbalance_detail,
            "vllm_config": self._vllm_config,
            "omni_memory_profile": self._omni_profile,
            "vllm_ready": self._vllm_ready,
            "vllm_weights": self._vllm_weights,
        }

    def _summary(self, stream: Stream, fact: Fact) -> None:
        self._launch.summary = fact
        self._launch.initialised = self._launch.initialised or fact.line

    def _progress(self, stream: Stream, fact: Fact) -> None:
        """A progress bar says which startup step is running, even in an excerpt."""
        state = self._rank_for(fact.line)
        state.last_checkpoint = "load_begin" if fact.kind == "load_progress" else "graph_begin"
        self._launch.progress = fact.kind

    def _omni_stage(self, stream: Stream, fact: Fact) -> None:
        """`sglang_ar_startup stage=X gpu_id=G ...`: X's own checkpoints follow until
        `sglang_ar_started stage=X` (stages load one at a time per GPU)."""
        launch = self._launch
        stage = fact.text("stage")
        gpu = fact.num("gpu_id")
        fraction = fact.num("mem_fraction_static")
        if fact.data.get("event") == "sglang_ar_started":
            launch.initialised = launch.initialised or fact.line
            if launch.loading_stage is not None and launch.loading_stage[0] == stage:
                launch.loading_stage = None
        elif stage:
            launch.loading_stage = (stage, int(gpu) if gpu is not None else None, fraction)

    def _omni_profile(self, stream: Stream, fact: Fact) -> None:
        """`SGLang AR memory profile: ... available_for_kv=X`: the loading stage's own KV budget."""
        available = fact.num("available_for_kv")
        if available is not None and self._launch.loading_stage is not None:
            state = self._rank_for(fact.line)
            state.values["omni_kv"] = Measured(available, fact.line)

    def _ready(self, stream: Stream, fact: Fact) -> None:
        self._launch.ready = self._launch.ready or fact.line

    def _traceback_start(self, stream: Stream, fact: Fact) -> None:
        if stream.open and stream.frames:
            self._cut(stream)  # the previous one never reached its exception line
        stream.start(fact.line)

    def _frame(self, stream: Stream, fact: Fact) -> None:
        stream.add_frame(
            Frame(
                str(fact.data["path"]),
                int(fact.num("lineno") or 0),
                str(fact.data["func"]),
                fact.line,
            )
        )

    def _warmup(self, stream: Stream, fact: Fact) -> None:
        stream.warmup = True

    # -- launches and server args ---------------------------------------------------------

    def _server_args(self, fact: Fact) -> None:
        body = fact.text("body") or ""
        parsed = parse_server_args(body)
        launch = self._launch
        if launch.started_loading or launch.failures:
            # A new start of the server: remember the old one only if it failed.
            if launch.failures:
                self._failed_launch = launch
            self._launch = launch = _Launch()
            self._launches += 1
        launch.server_args = parsed
        launch.server_args_line = fact.line
        self._keep(fact)

    def _vllm_config(self, stream: Stream, fact: Fact) -> None:
        """vLLM's `args: Namespace(...)`, `non-default args: {...}` and engine config lines."""
        launch = self._launch
        if launch.failures and fact.num("batched") is None:  # the engine is started again
            self._failed_launch = launch
            self._launch = launch = _Launch()
            self._launches += 1
        body = fact.text("ns") or fact.text("dict") or fact.text("config") or ""
        parsed = parse_pairs(body)
        resolved = parsed.pop("max_seq_len", None)  # the config line prints the resolved value
        if isinstance(resolved, int):
            parsed["max_model_len"] = resolved
        for key, value in parsed.items():
            if value is not None or key not in launch.server_args:
                launch.server_args[key] = value
        if fact.text("version"):
            launch.server_args["vllm_version"] = fact.text("version")
        if fact.text("dict") is not None:
            launch.server_args.setdefault("_vllm_non_default_args", True)
        batched = fact.num("batched")
        if batched is not None:  # the scheduler's resolved value
            launch.server_args["max_num_batched_tokens"] = int(batched)
        if body:
            launch.server_args_line = launch.server_args_line or fact.line

    def _vllm_weights(self, stream: Stream, fact: Fact) -> None:
        self._launch.progress = None  # `Model loading took ...`: the weights are in

    def _vllm_ready(self, stream: Stream, fact: Fact) -> None:
        self._launch.initialised = self._launch.initialised or fact.line
        self._launch.progress = None

    # -- checkpoints ------------------------------------------------------------------------

    def _rank_for(self, line: Line) -> _RankState:
        """The checkpoints this line belongs to: its rank tag, else the Omni stage now loading."""
        launch = self._launch
        key = line.rank
        stage = gpu = fraction = None
        if key is None and launch.loading_stage is not None:
            stage, gpu, fraction = launch.loading_stage
            key = stage
        key = key or "-"
        state = launch.ranks.get(key)
        if state is None:
            state = launch.ranks[key] = _RankState(key, stage=stage, gpu=gpu, fraction=fraction)
        return state

    def _checkpoint(self, stream: Stream, fact: Fact) -> None:
        state = self._rank_for(fact.line)
        line = fact.line
        put = state.values.__setitem__
        avail = fact.num("avail")
        if fact.kind == "load_begin" and avail is not None:
            put("pre", Measured(avail, line))
        elif fact.kind == "load_end":
            if avail is not None:
                put("post", Measured(avail, line))
            w = fact.num("w")
            if w is not None:
                put("weights", Measured(w, line))
        elif fact.kind == "kv_allocated":
            total = fact.num("total")
            if (total is not None and fact.data.get("label") in (None, "")) or (
                total is not None and "kv_logged" not in state.values
            ):
                put("kv_logged", Measured(total, line))
                put("kv_tokens", Measured(fact.num("tokens") or 0.0, line))
        elif fact.kind == "pool_end" and avail is not None:
            put("pool_end", Measured(avail, line))
        elif fact.kind == "graph_begin" and avail is not None:
            state.values.setdefault("graph_begin", Measured(avail, line))
        elif fact.kind == "graph_end":
            g = fact.num("g")
            if g is not None:  # a draft model's graphs add to the target's
                prev = state.values.get("graph_mem")
                put("graph_mem", Measured(g + (prev.value if prev else 0.0), line))
            if avail is not None:
                put("graph_end", Measured(avail, line))
        state.last_checkpoint = fact.kind

    # -- stats and retraction -----------------------------------------------------------------

    def _stats(self, fact: Fact) -> None:
        """A stats line the scanner kept as context: the latest one of each kind wins.

        Counting, peaks and the timeline come from the scanner's block summaries (add_stats).
        """
        acc = self._launch.stats
        if fact.data.get("phase") == "prefill":
            if acc.last_prefill is None or acc.last_prefill.line.seq < fact.line.seq:
                acc.last_prefill = fact
        elif acc.last_decode is None or acc.last_decode.line.seq < fact.line.seq:
            acc.last_decode = fact

    def add_stats(self, block: StatsBlock) -> None:
        """The summary of one block's stats lines (scan.Scanner.stats)."""
        acc = self._launch.stats
        acc.prefill_lines += block.prefill
        acc.decode_lines += block.decode
        self._detector.stats(block.prefill + block.decode)
        if block.peak_usage is not None and (
            acc.peak_token_usage is None or block.peak_usage > acc.peak_token_usage
        ):
            acc.peak_token_usage = block.peak_usage
        last = acc.last_decode
        acc.timeline.add_block(
            block.first_ts,
            block.last_ts,
            block.peak_usage,
            block.high_lines,
            block.usage_lines,
            int(last.num("running_req") or 0) if last else 0,
            int(last.num("queue_req") or 0) if last else 0,
        )

    def _retraction(self, stream: Stream, fact: Fact) -> None:
        acc = self._launch.stats
        acc.retractions += 1
        acc.retracted_requests += int(fact.num("n") or 0)
        acc.first_retraction = acc.first_retraction or fact.line
        acc.last_retraction = fact.line
        acc.timeline.retraction()

    # -- failures -------------------------------------------------------------------------------

    def _rank_state(self, line: Line) -> _RankState | None:
        ranks = self._launch.ranks
        if line.rank and line.rank in ranks:
            return ranks[line.rank]
        loading = self._launch.loading_stage
        if loading is not None and loading[0] in ranks:
            return ranks[loading[0]]
        if len(ranks) == 1:
            return next(iter(ranks.values()))
        if "-" in ranks:
            return ranks["-"]
        return None

    def _launch_phase(self, stream: Stream, line: Line) -> str:
        launch = self._launch
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

    def _place(
        self,
        stream: Stream,
        kind: str,
        line: Line,
        frames: tuple[Frame, ...],
        opener: Line | None,
        stage: str | None,
    ) -> tuple[str, Frame | None, str]:
        """Site (and the frame that says so) and phase of a failure."""
        texts = [line.text] + ([opener.text] if opener is not None else [])
        stages = [stage] if stage else []
        site, frame = sites.classify(frames, self.knowledge, texts, stages)
        if kind in STARTUP_KINDS:
            phase = "startup"
        elif stream.warmup:
            phase = "warmup"
        else:
            marked = sites.phase_of(frames, self.knowledge, texts)
            phase = marked or self._launch_phase(stream, line)
        if site == "unknown":
            site = self._site_from_checkpoints(kind, line, phase)
        if stream.capture_failed and kind != "graph_capture_failed":
            site = "graph_capture"
        return site, frame, phase

    def _site_from_checkpoints(self, kind: str, line: Line, phase: str) -> str:
        if kind == "graph_capture_failed":
            return "graph_capture"
        if kind not in OOM_KINDS:
            return "unknown"  # the startup step says where memory ran out, not where code broke
        if any(k in self._launch.counts for k in _VLLM_KINDS):
            # vLLM has no SGLang checkpoints; its weight-loading bar still says what is running
            return "weights" if self._launch.progress == "load_progress" else "unknown"
        if phase != "startup":
            return "unknown"
        state = self._rank_state(line)
        last = state.last_checkpoint if state else None
        return {
            "load_begin": "weights",
            "load_end": "kv_pool",
            "graph_begin": "graph_capture",
        }.get(last or "", "unknown")

    def _stage_of(self, line: Line, opener: Line | None) -> str | None:
        """The pipeline stage a failure happened in, from the lines themselves."""
        for candidate in (line, opener):
            stage = line_stage(candidate) if candidate is not None else None
            if stage:
                return stage
        loading = self._launch.loading_stage
        return loading[0] if loading is not None else None

    def _failure(self, stream: Stream, fact: Fact, kind: str) -> None:
        line = fact.line
        launch = self._launch
        text = line.text
        start = int(fact.num("_start") or 0)
        message = text[start:] if kind == "cuda_oom" else text.strip()
        if kind == "cuda_oom":
            message = message.removeprefix("OutOfMemoryError:").lstrip()
        if kind == "negative_profile" and (fact.num("profiled") or 0) > 0:
            return  # a clamp to a positive profiled value is not a failure
        frames = tuple(stream.frames) if stream.open else ()
        opener = stream.opener if stream.open else None
        if kind == "graph_capture_failed":
            stream.capture_failed = True
            last = stream.last_failure
            if (
                not fact.data.get("reason")
                and last is not None
                and last.oom is not None
                and line.number - last.line.number <= 12
            ):
                last.site = "graph_capture"  # 0.5.23 names the prefill runner after the OOM
                return
        stage = self._stage_of(line, opener)
        site, site_frame, phase = self._place(stream, kind, line, frames, opener, stage)
        key = (kind, _DIGITS.sub("#", message)[:160])
        existing = launch.failures.get(key)
        if existing is not None:
            if line.rank and line.rank not in existing.ranks:
                existing.ranks.append(line.rank)
            if not existing.frames and frames:
                self._give_frames(existing, frames, opener)
            return
        if len(launch.failures) >= MAX_FAILURES:
            return
        builder = FailureBuilder(
            kind=kind,
            line=line,
            message=message,
            ranks=[line.rank] if line.rank else [],
            frames=frames,
            site=site,
            phase=phase,
            data={k: v for k, v in fact.data.items() if not k.startswith("_")},
            site_frame=site_frame,
            opener=opener,
            stage=stage,
        )
        if kind == "cuda_oom":
            builder.oom = pytorch_oom.parse_oom(message)
            requests = pytorch_oom.sampler_requests(message)
            if requests is not None:
                builder.data["dummy_requests"] = requests
            self._after_cumem(builder)
            if pytorch_oom.needs_more(message):
                stream.open_oom = builder
                stream.oom_parts = [message]
                stream.open_oom_line = line.number
        elif kind in BARE_OOM_FORMS:
            builder.oom = pytorch_oom.bare(BARE_OOM_FORMS[kind])
        if kind == "cumem_oom":
            self._last_cumem = builder
        if not builder.data.get("precursor"):
            self._absorb_precursor(builder)
        launch.failures[key] = builder
        stream.last_failure = builder

    def _absorb_precursor(self, builder: FailureBuilder) -> None:
        """vLLM prints what it profiled (`Available KV cache memory: -2.77 GiB`, `# GPU blocks: 0`)
        just before it raises; when the error follows, it is the failure and keeps the numbers."""
        failures = self._launch.failures
        for key, value in list(failures.items()):
            if value.kind == builder.kind and value.data.get("precursor"):
                del failures[key]
                for k, v in value.data.items():
                    if k not in ("precursor", "variant"):
                        builder.data.setdefault(k, v)

    def _after_cumem(self, builder: FailureBuilder) -> None:
        """A PyTorch OOM after vLLM's bare cumem line (not raised: the allocation path printed it
        and returned nullptr) is the same failed allocation inside the sleep-mode pool, which
        PyTorch then raised with its numbers: keep that one failure."""
        cumem = self._last_cumem
        if cumem is None or cumem.data.get("raised"):
            return
        failures = self._launch.failures
        for key, value in list(failures.items()):
            if value.kind == "cumem_oom" and not value.data.get("raised"):
                del failures[key]
        builder.data["pool"] = "cumem"
        self._last_cumem = None

    def _give_frames(
        self, builder: FailureBuilder, frames: tuple[Frame, ...], opener: Line | None
    ) -> None:
        """Frames found after the failure line (the same message repeated at the end of its
        traceback, or a message pasted before its frames) place it."""
        builder.frames = frames
        builder.opener = builder.opener or opener
        texts = [builder.line.text] + ([opener.text] if opener is not None else [])
        stages = [builder.stage] if builder.stage else []
        site, frame = sites.classify(frames, self.knowledge, texts, stages)
        if site != "unknown" and builder.site in ("unknown", "forward"):
            builder.site, builder.site_frame = site, frame
        marked = sites.phase_of(frames, self.knowledge, texts)
        if marked is not None and builder.kind not in STARTUP_KINDS:
            builder.phase = marked

    def _cut(
        self,
        stream: Stream,
        failures: dict[tuple[str, str], FailureBuilder] | None = None,
        detector: Detector | None = None,
    ) -> None:
        """A run of frames that never reached its exception line."""
        target = stream.message_first()
        opener = stream.opener
        first = stream.frames[0].line if stream.frames else None
        if stream.frames:
            (detector or self._detector).frames(stream.frames)
        frames = stream.close_cut()
        if not frames:
            return
        if target is not None:
            self._give_frames(target, frames, opener)
            return
        line = frames[-1].line or first
        if line is None:
            return
        site, site_frame, phase = self._place(stream, "cut_traceback", line, frames, opener, None)
        builder = FailureBuilder(
            kind="cut_traceback",
            line=line,
            message="the traceback ends before its exception line",
            ranks=[line.rank] if line.rank else [],
            frames=frames,
            site=site,
            phase=phase,
            site_frame=site_frame,
            opener=opener,
            stage=self._stage_of(line, opener),
        )
        (failures if failures is not None else self._launch.failures)[
            ("cut_traceback", str(line.seq))
        ] = builder

    def _continue_oom(self, stream: Stream, line: Line) -> None:
        builder = stream.open_oom
        assert builder is not None
        if line.number - stream.open_oom_line > OOM_CONTINUATION_LINES:
            self._close_oom(stream)
            return
        stream.oom_parts.append(line.text)
        builder.oom = pytorch_oom.parse_wrapped(stream.oom_parts)
        builder.message = " ".join(p.strip() for p in stream.oom_parts)
        stream.open_oom_line = line.number
        if not pytorch_oom.needs_more(builder.message):
            self._close_oom(stream)

    def _close_oom(self, stream: Stream) -> None:
        stream.open_oom = None
        stream.oom_parts = []

    def _end_traceback(self, stream: Stream) -> None:
        if stream.frames:
            self._detector.frames(stream.frames)
        stream.end()

    def _imbalance_detail(self, stream: Stream, fact: Fact) -> None:
        """The numbers of an imbalance message that a wrap pushed onto the next line."""
        for builder in reversed(self._launch.failures.values()):
            if builder.kind == "tp_imbalance":
                if 0 < fact.line.number - builder.line.number <= 3:
                    for k in ("min", "local"):
                        value = fact.data.get(k)
                        if value is not None and builder.data.get(k) is None:
                            builder.data[k] = value
                return

    def _logical_detail(self, stream: Stream, fact: Fact) -> None:
        for builder in reversed(self._launch.failures.values()):
            if builder.kind == "logical_kv_failure":
                if fact.line.number - builder.line.number <= 12:
                    for k, v in fact.data.items():
                        if not k.startswith("_"):
                            builder.data.setdefault(k, v)
                return

    # -- result -----------------------------------------------------------------------------------

    def incident(self) -> Incident:
        for stream in self._streams.values():
            self._close_oom(stream)
        launch = self._launch
        notices = list(self._notices)
        if not launch.failures and self._failed_launch is not None:
            last_args = launch.server_args_line
            launch = self._failed_launch
            notices.append(
                f"the log holds {self._launches} launches; the last one"
                + (f" (line {last_args.number})" if last_args else "")
                + " has not failed, so the latest failed launch is diagnosed"
            )
        elif self._launches > 1:
            notices.append(f"the log holds {self._launches} launches; the last one is diagnosed")
        failures = dict(launch.failures)
        detector = self._detector
        if launch is self._launch:
            detector = detector.copy()
            for stream in self._streams.values():
                if stream.open and stream.frames:
                    self._cut(_Snapshot(stream), failures, detector)
        ranks = tuple(
            RankMemory(rank=r.rank, stage=r.stage, gpu=r.gpu, fraction=r.fraction, **r.values)
            for r in sorted(launch.ranks.values(), key=lambda s: _rank_sort(s.rank))
        )
        frozen = tuple(sorted((b.freeze() for b in failures.values()), key=lambda f: f.line.seq))
        facts = tuple(
            sorted((f for fs in launch.facts.values() for f in fs), key=lambda f: f.line.seq)
        )
        detected = detector.result()
        if detected.rival:
            notices.append(
                f"the log also looks like {detected.rival}; read as {detected.engine} "
                f"({detected.why})"
            )
        return Incident(
            sources=self.sources,
            lines_read=self.lines_read,
            last_ts=self.last_ts,
            engine=detected.engine,
            version=self._versions.guess(),
            server_args=launch.server_args,
            server_args_line=launch.server_args_line,
            ranks=ranks,
            summary=launch.summary,
            ready=launch.ready,
            failures=frozen,
            facts=facts,
            fact_counts=dict(launch.counts),
            stats=launch.stats.freeze(),
            notices=tuple(notices),
            stack=detected.stack,
            engine_why=detected.why,
            engine_evidence=detected.evidence,
            engine_rival=detected.rival,
            actor_roles=dict(detector.actor_roles),
            primary=primary_failure(frozen),
        )


class _Snapshot(Stream):
    """A copy of a stream, so that reading the incident mid-run (watch) changes nothing."""

    def __init__(self, stream: Stream) -> None:
        super().__init__(
            frames=list(stream.frames),
            open=stream.open,
            header=stream.header,
            opener=stream.opener,
            first_frame=stream.first_frame,
            frame_line=stream.frame_line,
            last_line=stream.last_line,
            last_failure=stream.last_failure,
        )


#: Facts only vLLM prints: one of them means SGLang's checkpoints cannot place a failure.
_VLLM_KINDS = (
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


def _redundant(kind: str, kinds: set[str]) -> bool:
    """A second failure fact on a line that already states the failure more precisely."""
    if kind == "graph_capture_failed":
        return bool(kinds & OOM_KINDS)  # the OOM itself is the failure, at the capture site
    if kind == "gpu_fault":
        return "graph_capture_failed" in kinds  # the capture failure carries the reason
    if kind == "cuda_error_oom":
        return bool(kinds & {"cumem_oom", "cumem_error"})  # vLLM's allocator names itself
    if kind in CONSEQUENCE_KINDS:
        return bool(kinds & MEMORY_KINDS)  # `Worker failed with error 'CUDA out of memory...'`
    return False


def _rank_sort(rank: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"-?\d+", rank)) or (-2,)
