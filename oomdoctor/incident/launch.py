"""One start of the server as the assembler reads it: its arguments, each rank's (or Omni
stage's) memory checkpoints, the stats summary and the failures so far.

Mutable while lines stream past, bounded (per-kind fact lists are capped, stats lines are
summarised), and frozen into the Incident's records at the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from oomdoctor.incident.timeline import TimelineBuilder, rate_per_hour
from oomdoctor.model import (
    Clues,
    Fact,
    Failure,
    Frame,
    Line,
    Measured,
    OomMessage,
    RankMemory,
    Scalar,
    StatsSummary,
)
from oomdoctor.read.stats import StatsBlock

MAX_FACTS_PER_KIND = 40


@dataclass
class RankState:
    rank: str
    values: dict[str, Measured] = field(default_factory=dict)
    last_checkpoint: str | None = None
    last_checkpoint_line: Line | None = None
    stage: str | None = None
    gpu: int | None = None
    fraction: float | None = None

    def freeze(self) -> RankMemory:
        return RankMemory(
            rank=self.rank, stage=self.stage, gpu=self.gpu, fraction=self.fraction, **self.values
        )


@dataclass
class FailureBuilder:
    kind: str
    line: Line
    message: str
    ranks: list[str]
    frames: tuple[Frame, ...]
    clues: Clues
    oom: OomMessage | None = None
    data: dict[str, Scalar] = field(default_factory=dict)
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
            data=dict(self.data),
            opener=self.opener,
            stage=self.stage,
            clues=self.clues,
        )


@dataclass
class StatsAcc:
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
    cumulative_preemptions: int | None = None

    def line(self, fact: Fact) -> None:
        """A stats line the scanner kept as context: the latest one of each kind wins.

        Counting, peaks and the timeline come from the scanner's block summaries (add_block).
        """
        if fact.data.get("phase") == "prefill":
            if self.last_prefill is None or self.last_prefill.line.seq < fact.line.seq:
                self.last_prefill = fact
        elif self.last_decode is None or self.last_decode.line.seq < fact.line.seq:
            self.last_decode = fact

    def add_block(self, block: StatsBlock) -> None:
        """The summary of one block's stats lines (scan.Scanner.stats)."""
        self.prefill_lines += block.prefill
        self.decode_lines += block.decode
        if block.peak_usage is not None and (
            self.peak_token_usage is None or block.peak_usage > self.peak_token_usage
        ):
            self.peak_token_usage = block.peak_usage
        last = self.last_decode
        self.timeline.add_block(
            block.first_ts,
            block.last_ts,
            block.peak_usage,
            block.high_lines,
            block.usage_lines,
            int(last.num("running_req") or 0) if last else 0,
            int(last.num("queue_req") or 0) if last else 0,
        )

    def retraction(self, fact: Fact) -> None:
        total = fact.num("total")
        if total is not None and total > (self.cumulative_preemptions or 0):
            self.cumulative_preemptions = int(total)
        self.retractions += 1
        self.retracted_requests += int(fact.num("n") or 0)
        self.first_retraction = self.first_retraction or fact.line
        self.last_retraction = fact.line
        self.timeline.retraction()

    def add_retractions(self, count: int, retracted: int) -> None:
        """Retractions between the first and last ones fed (their lines are not needed)."""
        self.retractions += count
        self.retracted_requests += retracted
        self.timeline.retraction(count)

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
            preempted=max(self.cumulative_preemptions or 0, self.retractions),
            retraction_rate=rate_per_hour(
                self.retractions,
                self.first_retraction.ts if self.first_retraction else None,
                self.last_retraction.ts if self.last_retraction else None,
            ),
        )


@dataclass
class Launch:
    """Everything about one start of the server (a log can hold several)."""

    server_args: dict[str, Scalar] = field(default_factory=dict)
    server_args_line: Line | None = None
    ranks: dict[str, RankState] = field(default_factory=dict)
    summary: Fact | None = None
    initialised: Line | None = None  # scheduler summary line, or Omni's sglang_ar_started
    ready: Line | None = None
    failures: dict[tuple[str, str], FailureBuilder] = field(default_factory=dict)
    facts: dict[str, list[Fact]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: StatsAcc = field(default_factory=StatsAcc)
    loading_stage: tuple[str, int | None, float | None] | None = None  # Omni: who loads now
    progress: str | None = None  # the last startup progress bar (load_progress, capture_progress)
    progress_line: Line | None = None

    @property
    def started_loading(self) -> bool:
        return any(r.values or r.last_checkpoint for r in self.ranks.values())

    def keep(self, fact: Fact) -> None:
        """Count the fact and keep it as evidence (the first ones of its kind and the latest)."""
        self.counts[fact.kind] = self.counts.get(fact.kind, 0) + 1
        kept = self.facts.setdefault(fact.kind, [])
        if len(kept) < MAX_FACTS_PER_KIND:
            kept.append(fact)
        else:
            kept[-1] = fact

    # -- checkpoints ------------------------------------------------------------------------

    def rank_for(self, line: Line) -> RankState:
        """The checkpoints this line belongs to: its rank tag, else the Omni stage now loading."""
        key = line.rank
        stage = gpu = fraction = None
        if key is None and self.loading_stage is not None:
            stage, gpu, fraction = self.loading_stage
            key = stage
        key = key or "-"
        state = self.ranks.get(key)
        if state is None:
            state = self.ranks[key] = RankState(key, stage=stage, gpu=gpu, fraction=fraction)
        return state

    def rank_state(self, line: Line) -> RankState | None:
        """The checkpoints a failure line belongs to, where the launch can tell."""
        if line.rank and line.rank in self.ranks:
            return self.ranks[line.rank]
        if self.loading_stage is not None and self.loading_stage[0] in self.ranks:
            return self.ranks[self.loading_stage[0]]
        if len(self.ranks) == 1:
            return next(iter(self.ranks.values()))
        return self.ranks.get("-")

    def checkpoint(self, fact: Fact) -> None:
        state = self.rank_for(fact.line)
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
        state.last_checkpoint_line = line

    def progress_bar(self, fact: Fact) -> None:
        """A progress bar says which startup step is running, even in an excerpt."""
        state = self.rank_for(fact.line)
        state.last_checkpoint = "load_begin" if fact.kind == "load_progress" else "graph_begin"
        state.last_checkpoint_line = fact.line
        self.progress = fact.kind
        self.progress_line = fact.line

    # -- SGLang Omni stages -----------------------------------------------------------------

    def omni_stage(self, fact: Fact) -> None:
        """`sglang_ar_startup stage=X gpu_id=G ...`: X's own checkpoints follow until
        `sglang_ar_started stage=X` (stages load one at a time per GPU)."""
        stage = fact.text("stage")
        gpu = fact.num("gpu_id")
        fraction = fact.num("mem_fraction_static")
        if fact.data.get("event") == "sglang_ar_started":
            self.initialised = self.initialised or fact.line
            if self.loading_stage is not None and self.loading_stage[0] == stage:
                self.loading_stage = None
        elif stage:
            self.loading_stage = (stage, int(gpu) if gpu is not None else None, fraction)

    def omni_profile(self, fact: Fact) -> None:
        """`SGLang AR memory profile: ... available_for_kv=X`: the loading stage's own KV budget."""
        available = fact.num("available_for_kv")
        if available is not None and self.loading_stage is not None:
            self.rank_for(fact.line).values["omni_kv"] = Measured(available, fact.line)

    # -- result -------------------------------------------------------------------------------

    def frozen_ranks(self) -> tuple[RankMemory, ...]:
        return tuple(
            r.freeze() for r in sorted(self.ranks.values(), key=lambda s: _rank_sort(s.rank))
        )


def _rank_sort(rank: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"-?\d+", rank)) or (-2,)
