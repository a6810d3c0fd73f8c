"""The failures of the launch being read: deduplicated across ranks, placed, with OOM messages
joined across wrapped lines and the lines that complete a failure folded into it.
"""

from __future__ import annotations

import re

from oomdoctor.extract import pytorch_oom
from oomdoctor.incident.detect import Detector
from oomdoctor.incident.launch import FailureBuilder, Launch
from oomdoctor.incident.place import observe, stage_of
from oomdoctor.incident.tracebacks import Stream
from oomdoctor.knowledge import Knowledge
from oomdoctor.knowledge.kinds import BARE_OOM_FORMS
from oomdoctor.model import Fact, Frame, Line

MAX_FAILURES = 200
OOM_CONTINUATION_LINES = 8
#: How far below its failure a detail line (the numbers a wrap pushed down) may stand.
IMBALANCE_DETAIL_LINES = 3
LOGICAL_DETAIL_LINES = 12
#: 0.5.23 names the prefill runner this soon after the OOM that failed its capture.
CAPTURE_NAMING_LINES = 12

_DIGITS = re.compile(r"\d+(?:\.\d+)?")

Failures = dict[tuple[str, str], FailureBuilder]


class FailureRecorder:
    """Records failure facts into a launch; keeps the little state that spans launches."""

    def __init__(self, knowledge: Knowledge, detector: Detector) -> None:
        self.knowledge = knowledge
        self.detector = detector
        self._last_cumem: FailureBuilder | None = None

    def record(self, launch: Launch, stream: Stream, fact: Fact, kind: str) -> None:
        line = fact.line
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
            stream.capture_failed = line
            last = stream.last_failure
            if (
                not fact.data.get("reason")
                and last is not None
                and last.oom is not None
                and line.number - last.line.number <= CAPTURE_NAMING_LINES
            ):
                # 0.5.23 names the prefill runner after the OOM that failed its capture
                last.clues = last.clues._replace(capture_failed=line)
                return
        stage = stage_of(launch, line, opener)
        key = (kind, _DIGITS.sub("#", message)[:160])
        existing = launch.failures.get(key)
        if existing is not None:
            if line.rank and line.rank not in existing.ranks:
                existing.ranks.append(line.rank)
            if not existing.frames and frames:
                refine(existing, frames, opener)
            return
        if len(launch.failures) >= MAX_FAILURES:
            return
        builder = FailureBuilder(
            kind=kind,
            line=line,
            message=message,
            ranks=[line.rank] if line.rank else [],
            frames=frames,
            clues=observe(launch, stream, line, opener),
            data={k: v for k, v in fact.data.items() if not k.startswith("_")},
            opener=opener,
            stage=stage,
        )
        if kind == "cuda_oom":
            builder.oom = pytorch_oom.parse_oom(message)
            requests = pytorch_oom.sampler_requests(message)
            if requests is not None:
                builder.data["dummy_requests"] = requests
            self._after_cumem(launch, builder)
            if pytorch_oom.needs_more(message):
                stream.open_oom = builder
                stream.oom_parts = [message]
                stream.open_oom_line = line.number
        elif kind in BARE_OOM_FORMS:
            builder.oom = pytorch_oom.bare(BARE_OOM_FORMS[kind])
        if kind == "cumem_oom":
            self._last_cumem = builder
        if not builder.data.get("precursor"):
            _absorb_precursor(launch, builder)
        launch.failures[key] = builder
        stream.last_failure = builder

    def _after_cumem(self, launch: Launch, builder: FailureBuilder) -> None:
        """A PyTorch OOM after vLLM's bare cumem line (not raised: the allocation path printed it
        and returned nullptr) is the same failed allocation inside the sleep-mode pool, which
        PyTorch then raised with its numbers: keep that one failure."""
        cumem = self._last_cumem
        if cumem is None or cumem.data.get("raised"):
            return
        failures = launch.failures
        for key, value in list(failures.items()):
            if value.kind == "cumem_oom" and not value.data.get("raised"):
                del failures[key]
        builder.data["pool"] = "cumem"
        self._last_cumem = None

    def cut(
        self,
        launch: Launch,
        stream: Stream,
        failures: Failures | None = None,
        detector: Detector | None = None,
    ) -> None:
        """A run of frames that never reached its exception line."""
        target = stream.message_first()
        opener = stream.opener
        first = stream.frames[0].line if stream.frames else None
        if stream.frames:
            (detector or self.detector).frames(stream.frames)
        frames = stream.close_cut()
        if not frames:
            return
        if target is not None:
            refine(target, frames, opener)
            return
        line = frames[-1].line or first
        if line is None:
            return
        builder = FailureBuilder(
            kind="cut_traceback",
            line=line,
            message="the traceback ends before its exception line",
            ranks=[line.rank] if line.rank else [],
            frames=frames,
            clues=observe(launch, stream, line, opener),
            opener=opener,
            stage=stage_of(launch, line, opener),
        )
        (failures if failures is not None else launch.failures)[
            ("cut_traceback", str(line.seq))
        ] = builder

    def end_traceback(self, stream: Stream) -> None:
        if stream.frames:
            self.detector.frames(stream.frames)
        stream.end()


def refine(builder: FailureBuilder, frames: tuple[Frame, ...], opener: Line | None) -> None:
    """Frames found after the failure line (the same message repeated at the end of its
    traceback, or a message pasted before its frames) belong to it."""
    builder.frames = frames
    builder.opener = builder.opener or opener


def _absorb_precursor(launch: Launch, builder: FailureBuilder) -> None:
    """vLLM prints what it profiled (`Available KV cache memory: -2.77 GiB`, `# GPU blocks: 0`)
    just before it raises; when the error follows, it is the failure and keeps the numbers."""
    failures = launch.failures
    for key, value in list(failures.items()):
        if value.kind == builder.kind and value.data.get("precursor"):
            del failures[key]
            for k, v in value.data.items():
                if k not in ("precursor", "variant"):
                    builder.data.setdefault(k, v)


def continue_oom(stream: Stream, line: Line) -> None:
    """A line that continues an OOM message a wrap broke: parse the joined text again."""
    builder = stream.open_oom
    assert builder is not None
    if line.number - stream.open_oom_line > OOM_CONTINUATION_LINES:
        close_oom(stream)
        return
    stream.oom_parts.append(line.text)
    builder.oom = pytorch_oom.parse_wrapped(stream.oom_parts)
    builder.message = " ".join(p.strip() for p in stream.oom_parts)
    stream.open_oom_line = line.number
    if not pytorch_oom.needs_more(builder.message):
        close_oom(stream)


def close_oom(stream: Stream) -> None:
    stream.open_oom = None
    stream.oom_parts = []


def imbalance_detail(launch: Launch, fact: Fact) -> None:
    """The numbers of an imbalance message that a wrap pushed onto the next line."""
    for builder in reversed(launch.failures.values()):
        if builder.kind == "tp_imbalance":
            if 0 < fact.line.number - builder.line.number <= IMBALANCE_DETAIL_LINES:
                for k in ("min", "local"):
                    value = fact.data.get(k)
                    if value is not None and builder.data.get(k) is None:
                        builder.data[k] = value
            return


def logical_detail(launch: Launch, fact: Fact) -> None:
    """The token counts SGLang prints under a `Prefill/Decode out of memory` line."""
    for builder in reversed(launch.failures.values()):
        if builder.kind == "logical_kv_failure":
            if fact.line.number - builder.line.number <= LOGICAL_DETAIL_LINES:
                for k, v in fact.data.items():
                    if not k.startswith("_"):
                        builder.data.setdefault(k, v)
            return
