"""Everything a log says, assembled: the Incident and its stats summary.

No ``from __future__ import annotations`` here: typing.NamedTuple compiles every field annotation
given as a string (a ForwardRef), which made defining these records take twice as long.
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.model.log import Fact, Failure, Line, RankMemory, Scalar

_TP_RANK = re.compile(r"\bTP(\d+)\b")


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
