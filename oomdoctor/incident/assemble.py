"""Assemble facts into an incident: launches, per-rank (and per-stage) checkpoints, tracebacks,
failures, and the engine that printed it all.

State is bounded (incident/launch.py), and a log with several launches keeps only the launch that
failed last (or the last one). Nothing here depends on having seen the startup: an excerpt that
starts mid-traceback is read the same way. Failures are recorded and placed by
incident/failures.py and incident/place.py; this module routes each fact to its handler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from oomdoctor.extract.fold import FOLDED_HANDLED, KEPT_KINDS, Folded, fold_notice
from oomdoctor.extract.signatures.startup import parse_pairs, parse_server_args
from oomdoctor.incident import failures as fail
from oomdoctor.incident.detect import Detector
from oomdoctor.incident.failures import FailureRecorder, Failures
from oomdoctor.incident.launch import Launch
from oomdoctor.incident.primary import primary_failure
from oomdoctor.incident.tracebacks import Stream
from oomdoctor.incident.versions import VersionTracker
from oomdoctor.knowledge import Knowledge, builtin
from oomdoctor.knowledge.kinds import CONSEQUENCE_KINDS, FAILURE_KINDS, MEMORY_KINDS, OOM_KINDS
from oomdoctor.model import Fact, Frame, Incident, Line
from oomdoctor.read.stats import StatsBlock
from oomdoctor.rules.clock import PatternClock

Handler = Callable[[Stream, Fact], None]
#: Lines whose refused settings the notice names.
MAX_REFUSED_ARGS = 3
#: Streams (one per source and PID) kept however little they hold; past twice as many, the
#: older ones that hold nothing but their last line are forgotten.
MAX_IDLE_STREAMS = 4096
#: Fact kinds that are parts of other facts, or read elsewhere: not kept or counted as facts.
UNKEPT = frozenset({"oom_part", "stats", "marker", "code"})


class Assembler:
    """Consumes ``(line, facts)`` pairs in log order; ``incident()`` freezes the result."""

    def __init__(
        self,
        sources: Iterable[str],
        knowledge: Knowledge | None = None,
        clock: PatternClock | None = None,
    ) -> None:
        self.sources = tuple(sources)
        self.knowledge = knowledge or builtin()
        self.lines_read = 0
        self.last_ts: str | None = None
        self._launch = Launch()
        self._failed_launch: Launch | None = None
        self._launches = 1
        self._streams: dict[tuple[int, int | None], Stream] = {}
        #: the streams whose OOM message may still go on: id → (source, stream)
        self._open_ooms: dict[int, tuple[int, Stream]] = {}
        self._versions = VersionTracker()
        self._stats_versions_seen: set[str] = set()
        self._detector = Detector(self.knowledge, clock)  # clock: the run's, for user regexes
        self._failures = FailureRecorder(self.knowledge, self._detector)
        self._handlers = self._make_handlers()
        self._refused_args: list[str] = []  # `key=text` of settings outside the physical range
        self._folded_lines = 0  # lines counted, not assembled (extract/fold.py)
        self._folded_processes = 0  # ... and the processes they came from

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, line: Line, facts: list[Fact]) -> None:
        stream = self._feed(line, facts)
        if stream.open_oom is not None:  # a wrapped OOM message may go on in a bare line
            self._open_ooms[id(stream)] = (line.source, stream)

    def _feed(self, line: Line, facts: list[Fact]) -> Stream:
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
        key = (line.source, line.actor_pid)
        stream = self._streams.pop(key, None) or Stream()
        self._streams[key] = stream  # the most recent last: idle old ones can go
        if len(self._streams) > 2 * MAX_IDLE_STREAMS:
            self._forget_idle()
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
            return stream
        if "graph_capture_failed" in kinds:
            stream.capture_failed = line  # an OOM on this very line happened during capture
        if stream.open_oom is not None and "oom_part" in kinds and not kinds & FAILURE_KINDS:
            fail.continue_oom(stream, line)
            return stream
        if stream.open_oom is not None:
            fail.close_oom(stream)
        # The exception line closes its traceback: failures on the same line must see the frames.
        for fact in sorted(facts, key=lambda f: f.kind == "exception"):
            self._fact(stream, fact, kinds)
        if "frame" not in kinds:
            stream.last_line = line
        return stream

    def unfoldable(self) -> frozenset[str]:
        """Fact kinds whose every line must be assembled (extract/fold.py): what fold.py keeps,
        and every kind with a handler here (it changes the launch or the stream)."""
        return KEPT_KINDS | (frozenset(self._handlers) - FOLDED_HANDLED)

    def add_folded(self, folded: Folded) -> None:
        """Lines that were counted, not assembled (extract/fold.py)."""
        counts = self._launch.counts
        for kind, lines in folded.kinds().items():
            if kind not in UNKEPT and kind != "frame":  # as _fact counts them
                counts[kind] = counts.get(kind, 0) + lines
        self._detector.folded(folded)
        self._folded_lines += folded.lines
        self._folded_processes += folded.processes

    def _forget_idle(self) -> None:
        """Keep the MAX_IDLE_STREAMS most recent streams; of the older ones, those holding
        nothing but their last line go (a log of 100k worker PIDs would keep one each)."""
        excess = len(self._streams) - MAX_IDLE_STREAMS
        for key in list(self._streams):
            if excess <= 0:
                break
            if self._streams[key].idle:
                del self._streams[key]
                excess -= 1

    def _wrapping_stream(self, line: Line) -> Stream | None:
        """The stream whose OOM message a bare line may continue: only streams with an open
        message are looked at (all streams, one per PID, for every bare line is quadratic)."""
        found = None
        for key, (source, other) in list(self._open_ooms.items()):
            if other.open_oom is None:
                del self._open_ooms[key]
            elif (
                found is None
                and source == line.source
                and 0 < line.number - other.open_oom_line <= 2
            ):
                found = other
        return found

    def _fact(self, stream: Stream, fact: Fact, kinds: set[str]) -> None:
        kind = fact.kind
        if kind == "server_args":
            self._server_args(fact)
            return
        if kind in UNKEPT:
            if kind == "stats":
                self._launch.stats.line(fact)
            return
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(stream, fact)
        elif kind == "exception":
            if not (kinds & FAILURE_KINDS):
                self._failures.record(self._launch, stream, fact, "exception")
            self._failures.end_traceback(stream)
        elif kind in FAILURE_KINDS and not _redundant(kind, kinds):
            self._failures.record(self._launch, stream, fact, kind)
        if kind != "frame":
            self._launch.keep(fact)

    def _make_handlers(self) -> dict[str, Handler]:
        """Fact kind → what it does to the launch or the stream (failure kinds not listed here
        are recorded as failures)."""

        def on_launch(method: Callable[[Launch, Fact], None]) -> Handler:
            return lambda stream, fact: method(self._launch, fact)

        checkpoint = on_launch(Launch.checkpoint)
        return {
            "load_begin": checkpoint,
            "load_end": checkpoint,
            "kv_allocated": checkpoint,
            "pool_end": checkpoint,
            "graph_begin": checkpoint,
            "graph_end": checkpoint,
            "load_progress": on_launch(Launch.progress_bar),
            "capture_progress": on_launch(Launch.progress_bar),
            "summary": self._summary,
            "omni_stage": on_launch(Launch.omni_stage),
            "omni_memory_profile": on_launch(Launch.omni_profile),
            "ready": self._ready,
            "retraction": lambda stream, fact: self._launch.stats.retraction(fact),
            "traceback_start": self._traceback_start,
            "frame": self._frame,
            "warmup_failed": self._warmup,
            "logical_kv_detail": on_launch(fail.logical_detail),
            "tp_imbalance_detail": on_launch(fail.imbalance_detail),
            "vllm_config": self._vllm_config,
            "vllm_ready": self._vllm_ready,
            "vllm_weights": self._vllm_weights,
        }

    def _summary(self, stream: Stream, fact: Fact) -> None:
        self._launch.summary = fact
        self._launch.initialised = self._launch.initialised or fact.line

    def _ready(self, stream: Stream, fact: Fact) -> None:
        self._launch.ready = self._launch.ready or fact.line

    def _traceback_start(self, stream: Stream, fact: Fact) -> None:
        if stream.open and stream.frames:
            self._failures.cut(self._launch, stream)  # the last one never reached its exception
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

    def add_retractions(self, count: int, retracted: int) -> None:
        """Retraction lines the scanner counted instead of passing (scan.RETRACTIONS_KEPT): as
        many facts of their kind, requests and timeline marks as if each had been fed."""
        launch = self._launch
        launch.counts["retraction"] = launch.counts.get("retraction", 0) + count
        launch.stats.add_retractions(count, retracted)

    def add_stats(self, block: StatsBlock) -> None:
        """The summary of one block's stats lines (scan.Scanner.stats)."""
        self._launch.stats.add_block(block)
        self._detector.stats(block.prefill + block.decode)

    # -- launches and server args ---------------------------------------------------------

    def _new_launch(self) -> Launch:
        """A new start of the server: the old one is remembered only if it failed."""
        if self._launch.failures:
            self._failed_launch = self._launch
        self._launch = Launch()
        self._launches += 1
        return self._launch

    def _server_args(self, fact: Fact) -> None:
        refused: list[str] = []
        parsed = parse_server_args(fact.text("body") or "", refused)
        self._refuse_args(fact.line, refused)
        launch = self._launch
        if launch.started_loading or launch.failures:
            launch = self._new_launch()
        launch.server_args = parsed
        launch.server_args_line = fact.line
        launch.keep(fact)

    def _vllm_config(self, stream: Stream, fact: Fact) -> None:
        """vLLM's `args: Namespace(...)`, `non-default args: {...}` and engine config lines."""
        launch = self._launch
        if launch.failures and fact.num("batched") is None:  # the engine is started again
            launch = self._new_launch()
        body = fact.text("ns") or fact.text("dict") or fact.text("config") or ""
        refused: list[str] = []
        parsed = parse_pairs(body, refused)
        self._refuse_args(fact.line, refused)
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

    def _refuse_args(self, line: Line, refused: list[str]) -> None:
        if refused and len(self._refused_args) < MAX_REFUSED_ARGS:
            shown = ", ".join(refused[:MAX_REFUSED_ARGS])
            source = self.sources[line.source] if line.source < len(self.sources) else "line"
            self._refused_args.append(f"{source}:{line.number} {shown}")

    def _vllm_weights(self, stream: Stream, fact: Fact) -> None:
        self._launch.progress = self._launch.progress_line = None  # `Model loading took ...`

    def _vllm_ready(self, stream: Stream, fact: Fact) -> None:
        self._launch.initialised = self._launch.initialised or fact.line
        self._launch.progress = self._launch.progress_line = None

    # -- result -----------------------------------------------------------------------------------

    def incident(self) -> Incident:
        for stream in self._streams.values():
            fail.close_oom(stream)
        launch = self._launch
        notices: list[str] = []
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
        failures: Failures = dict(launch.failures)
        detector = self._detector
        if launch is self._launch:
            detector = detector.copy()
            for stream in self._streams.values():
                if stream.open and stream.frames:
                    self._failures.cut(launch, _Snapshot(stream), failures, detector)
        frozen = tuple(sorted((b.freeze() for b in failures.values()), key=lambda f: f.line.seq))
        facts = tuple(
            sorted((f for fs in launch.facts.values() for f in fs), key=lambda f: f.line.seq)
        )
        detected = detector.result()
        if self._refused_args:
            notices.append(
                "settings outside the physical range were ignored (an infinity, NaN, or beyond "
                f"64 bits): {'; '.join(self._refused_args)}"
            )
        if self._folded_lines:
            notices.append(fold_notice(self._folded_lines, self._folded_processes))
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
            ranks=launch.frozen_ranks(),
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

    __slots__ = ()

    def __init__(self, stream: Stream) -> None:
        super().__init__()
        self.frames = list(stream.frames)
        self.open = stream.open
        self.header = stream.header
        self.opener = stream.opener
        self.first_frame = stream.first_frame
        self.frame_line = stream.frame_line
        self.last_line = stream.last_line
        self.last_failure = stream.last_failure


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
