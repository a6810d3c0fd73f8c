"""Assemble facts into an incident: launches, per-rank checkpoints, tracebacks, failures.

State is bounded: per-kind fact lists are capped, stats lines are summarised as they pass, and a
log with several launches keeps only the launch that failed last (or the last one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from oomdoctor import pytorch_oom, sites
from oomdoctor.kinds import BARE_OOM_FORMS, FAILURE_KINDS, OOM_KINDS, STARTUP_KINDS
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
from oomdoctor.scan import StatsBlock
from oomdoctor.signatures.startup import parse_pairs, parse_server_args
from oomdoctor.timeline import TimelineBuilder
from oomdoctor.versions import VersionTracker

MAX_FACTS_PER_KIND = 40
MAX_FRAMES = 120
MAX_FAILURES = 200
OOM_CONTINUATION_LINES = 8

_CHECKPOINTS = ("load_begin", "load_end", "kv_allocated", "pool_end", "graph_begin", "graph_end")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")


@dataclass
class _RankState:
    rank: str
    values: dict[str, Measured] = field(default_factory=dict)
    last_checkpoint: str | None = None


@dataclass
class _FailureBuilder:
    kind: str
    line: Line
    message: str
    ranks: list[str]
    frames: tuple[Frame, ...]
    site: str
    phase: str
    oom: OomMessage | None = None
    oom_text: str | None = None  # kept while a wrapped OOM message may still continue
    data: dict[str, Scalar] = field(default_factory=dict)

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
        )


@dataclass
class _Stream:
    frames: list[Frame] = field(default_factory=list)
    in_traceback: bool = False
    warmup: bool = False
    capture_failed: bool = False
    open_oom: _FailureBuilder | None = None
    open_oom_line: int = 0
    last_failure: _FailureBuilder | None = None
    frame_line: int = -1  # line number of the last `File "...", line N, in f` frame


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
    failures: dict[tuple[str, str], _FailureBuilder] = field(default_factory=dict)
    facts: dict[str, list[Fact]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: _StatsAcc = field(default_factory=lambda: _StatsAcc())

    @property
    def started_loading(self) -> bool:
        return any(r.values or r.last_checkpoint for r in self.ranks.values())


class Assembler:
    """Consumes ``(line, facts)`` pairs in log order; ``incident()`` freezes the result."""

    def __init__(self, sources: Iterable[str]) -> None:
        self.sources = tuple(sources)
        self.lines_read = 0
        self.last_ts: str | None = None
        self._launch = _Launch()
        self._failed_launch: _Launch | None = None
        self._launches = 1
        self._streams: dict[tuple[int, int | None], _Stream] = {}
        self._versions = VersionTracker()
        self._stats_versions_seen: set[str] = set()
        self._notices: list[str] = []
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
        stream = self._streams.setdefault((line.source, line.actor_pid), _Stream())
        if "frame" in kinds:
            stream.frame_line = line.number
        elif line.number == stream.frame_line + 1 and line.text[:1].isspace():
            # The source line a traceback prints under its frame: `raise ValueError("No
            # available memory ...")` repeats the message's words but is code, not a message.
            return
        if "graph_capture_failed" in kinds:
            stream.capture_failed = True  # an OOM on this very line happened during capture
        if stream.open_oom is not None and "oom_part" in kinds and "cuda_oom" not in kinds:
            self._continue_oom(stream, line)
            return
        if stream.open_oom is not None:
            self._close_oom(stream)
        # The exception line closes its traceback: failures on the same line must see the frames.
        for fact in sorted(facts, key=lambda f: f.kind == "exception"):
            self._fact(stream, fact, kinds)

    def _keep(self, fact: Fact) -> None:
        launch = self._launch
        launch.counts[fact.kind] = launch.counts.get(fact.kind, 0) + 1
        kept = launch.facts.setdefault(fact.kind, [])
        if len(kept) < MAX_FACTS_PER_KIND:
            kept.append(fact)
        else:  # keep the first ones and the latest one
            kept[-1] = fact

    def _fact(self, stream: _Stream, fact: Fact, kinds: set[str]) -> None:
        kind = fact.kind
        if kind == "server_args":
            self._server_args(fact)
            return
        if kind in ("oom_part", "stats"):
            if kind == "stats":
                self._stats(fact)
            return
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(stream, fact)
        elif kind == "exception":
            if not (kinds & FAILURE_KINDS) and stream.in_traceback:
                self._failure(stream, fact, "exception")
            self._end_traceback(stream)
        elif kind in FAILURE_KINDS and not _redundant(kind, kinds):
            self._failure(stream, fact, kind)
        if kind != "frame":
            self._keep(fact)

    def _make_handlers(self) -> dict[str, Callable[[_Stream, Fact], None]]:
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
            "vllm_config": self._vllm_config,
            "vllm_ready": self._vllm_ready,
        }

    def _summary(self, stream: _Stream, fact: Fact) -> None:
        self._launch.summary = fact
        self._launch.initialised = self._launch.initialised or fact.line

    def _progress(self, stream: _Stream, fact: Fact) -> None:
        """A progress bar says which startup step is running, even in an excerpt."""
        rank = fact.line.rank or "-"
        state = self._launch.ranks.setdefault(rank, _RankState(rank))
        state.last_checkpoint = "load_begin" if fact.kind == "load_progress" else "graph_begin"

    def _omni_stage(self, stream: _Stream, fact: Fact) -> None:
        if fact.data.get("event") == "sglang_ar_started":
            self._launch.initialised = self._launch.initialised or fact.line

    def _ready(self, stream: _Stream, fact: Fact) -> None:
        self._launch.ready = self._launch.ready or fact.line

    def _traceback_start(self, stream: _Stream, fact: Fact) -> None:
        stream.frames.clear()
        stream.in_traceback = True

    def _frame(self, stream: _Stream, fact: Fact) -> None:
        if len(stream.frames) >= MAX_FRAMES:
            del stream.frames[0]
        stream.frames.append(
            Frame(
                str(fact.data["path"]),
                int(fact.num("lineno") or 0),
                str(fact.data["func"]),
                fact.line,
            )
        )

    def _warmup(self, stream: _Stream, fact: Fact) -> None:
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

    def _vllm_config(self, stream: _Stream, fact: Fact) -> None:
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

    def _vllm_ready(self, stream: _Stream, fact: Fact) -> None:
        self._launch.initialised = self._launch.initialised or fact.line

    # -- checkpoints ------------------------------------------------------------------------

    def _checkpoint(self, stream: _Stream, fact: Fact) -> None:
        rank = fact.line.rank or "-"
        state = self._launch.ranks.setdefault(rank, _RankState(rank))
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

    def _retraction(self, stream: _Stream, fact: Fact) -> None:
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
        if len(ranks) == 1:
            return next(iter(ranks.values()))
        if "-" in ranks:
            return ranks["-"]
        return None

    def _phase(self, stream: _Stream, line: Line) -> str:
        launch = self._launch
        if stream.warmup:
            return "warmup"
        if launch.ready is not None and launch.ready.seq < line.seq:
            return "running"
        # The scheduler prints its summary line when initialisation is complete (Omni: the
        # stage's "started" line); an offline Engine (RL rollouts) never prints a ready line.
        if launch.initialised is not None and launch.initialised.seq < line.seq:
            return "running"
        if launch.started_loading or launch.server_args_line is not None:
            return "startup"
        if any(k in launch.counts for k in ("vllm_weights", "vllm_profile", "vllm_mm_profile")):
            return "startup"  # a vLLM excerpt that starts in the middle of loading
        return "unknown"

    def _site(self, frames: tuple[Frame, ...], line: Line, phase: str, kind: str) -> str:
        site, _ = sites.classify(frames)
        if site != "unknown":
            return site
        if kind == "graph_capture_failed":
            return "graph_capture"
        if phase != "startup" or any(k in self._launch.counts for k in _VLLM_KINDS):
            return "unknown"  # vLLM has no SGLang checkpoints to place a startup failure by
        state = self._rank_state(line)
        last = state.last_checkpoint if state else None
        return {
            "load_begin": "weights",
            "load_end": "kv_pool",
            "graph_begin": "graph_capture",
        }.get(last or "", "unknown")

    def _failure(self, stream: _Stream, fact: Fact, kind: str) -> None:
        line = fact.line
        launch = self._launch
        text = line.text
        start = int(fact.num("_start") or 0)
        message = text[start:] if kind in ("cuda_oom",) else text.strip()
        if kind == "negative_profile" and (fact.num("profiled") or 0) > 0:
            return  # a clamp to a positive profiled value is not a failure
        frames = tuple(stream.frames) if stream.in_traceback else ()
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
        phase = "startup" if kind in STARTUP_KINDS else self._phase(stream, line)
        site = self._site(frames, line, phase, kind)
        if stream.capture_failed and kind != "graph_capture_failed":
            site = "graph_capture"
        key = (kind, _DIGITS.sub("#", message)[:160])
        existing = launch.failures.get(key)
        if existing is not None:
            if line.rank and line.rank not in existing.ranks:
                existing.ranks.append(line.rank)
            if not existing.frames and frames:
                existing.frames = frames
                existing.site = site if existing.site == "unknown" else existing.site
            return
        if len(launch.failures) >= MAX_FAILURES:
            return
        builder = _FailureBuilder(
            kind=kind,
            line=line,
            message=message,
            ranks=[line.rank] if line.rank else [],
            frames=frames,
            site=site,
            phase=phase,
            data={k: v for k, v in fact.data.items() if not k.startswith("_")},
        )
        if kind == "cuda_oom":
            builder.oom = pytorch_oom.parse_oom(message)
            if pytorch_oom.needs_more(message):
                builder.oom_text = message
                stream.open_oom = builder
                stream.open_oom_line = line.number
        elif kind in BARE_OOM_FORMS:
            builder.oom = pytorch_oom.bare(BARE_OOM_FORMS[kind])
        launch.failures[key] = builder
        stream.last_failure = builder

    def _continue_oom(self, stream: _Stream, line: Line) -> None:
        builder = stream.open_oom
        assert builder is not None and builder.oom_text is not None
        if line.number - stream.open_oom_line > OOM_CONTINUATION_LINES:
            self._close_oom(stream)
            return
        builder.oom_text += " " + line.text.strip()
        builder.oom = pytorch_oom.parse_oom(builder.oom_text)
        builder.message = builder.oom_text
        stream.open_oom_line = line.number
        if not pytorch_oom.needs_more(builder.oom_text):
            self._close_oom(stream)

    def _close_oom(self, stream: _Stream) -> None:
        if stream.open_oom is not None:
            stream.open_oom.oom_text = None
        stream.open_oom = None

    def _end_traceback(self, stream: _Stream) -> None:
        stream.in_traceback = False
        stream.frames.clear()
        stream.warmup = False
        stream.capture_failed = False

    def _logical_detail(self, stream: _Stream, fact: Fact) -> None:
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
        ranks = tuple(
            RankMemory(rank=r.rank, **r.values)
            for r in sorted(launch.ranks.values(), key=lambda s: _rank_sort(s.rank))
        )
        failures = tuple(
            sorted((b.freeze() for b in launch.failures.values()), key=lambda f: f.line.seq)
        )
        facts = tuple(
            sorted((f for fs in launch.facts.values() for f in fs), key=lambda f: f.line.seq)
        )
        return Incident(
            sources=self.sources,
            lines_read=self.lines_read,
            last_ts=self.last_ts,
            engine=self._engine(launch),
            version=self._versions.guess(),
            server_args=launch.server_args,
            server_args_line=launch.server_args_line,
            ranks=ranks,
            summary=launch.summary,
            ready=launch.ready,
            failures=failures,
            facts=facts,
            fact_counts=dict(launch.counts),
            stats=launch.stats.freeze(),
            notices=tuple(notices),
        )

    def _engine(self, launch: _Launch) -> str | None:
        if any(kind in launch.counts for kind in _VLLM_KINDS):
            return "vllm"
        if "omni_stage" in launch.counts or "omni_stage_group" in launch.counts:
            return "sglang-omni"
        if "omni_compute_failed" in launch.counts:
            return "sglang-omni"
        if "omni_stage_dead" in launch.counts or "omni_memory_profile" in launch.counts:
            return "sglang-omni"
        if launch.server_args_line or launch.ranks or launch.counts.get("stats"):
            return "sglang"
        return None


#: Facts only vLLM prints: one of them makes the log a vLLM log.
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
    return False


def _rank_sort(rank: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"-?\d+", rank)) or (-2,)
