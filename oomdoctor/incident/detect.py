"""Which engine printed a log, and what runs around it, told from any line.

The evidence is the table of knowledge/engines.toml: a logger envelope, a `(Name pid=N)` process
prefix, a message only one engine prints, the outermost engine frame of a traceback. Every line
that carries a marker votes; the engine family with the strongest evidence wins (ties: the one
seen on more lines), then the most specific variant of that family that has evidence of its own
(SGLang Omni, vLLM-Omni, vLLM-Ascend). Nothing here depends on having seen the startup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from oomdoctor.extract.fold import Folded
from oomdoctor.knowledge import FAMILY, EngineMarker, Knowledge
from oomdoctor.model import Frame, Line
from oomdoctor.rules.clock import PatternClock

#: Evidence lines kept per engine (the first ones).
MAX_EVIDENCE = 3
#: Process names whose engine markers are remembered (a name per worker rank can be 100k).
ACTOR_CACHE = 4096
#: Every ASCII digit of a process name → 0 (the key of its cached markers).
_ZERO_DIGITS = MappingProxyType({ord(d): "0" for d in "123456789"})


class Detected(NamedTuple):
    engine: str | None  # sglang, sglang-omni, vllm, vllm-omni, vllm-ascend; None: cannot tell
    stack: tuple[str, ...] = ()  # verl, torch_memory_saver, vllm-sleep-mode, ray, ...
    evidence: tuple[Line, ...] = ()
    why: str | None = None  # what decided, in words
    rival: str | None = None  # the other family, when it had strong evidence too


class _Tally:
    __slots__ = ("count", "lines", "notes", "score")

    def __init__(self) -> None:
        self.score = 0.0
        self.count = 0
        self.lines: list[Line] = []
        self.notes: list[str] = []


def _user_actor_regexes(knowledge: Knowledge, actors: Sequence[EngineMarker]) -> dict[int, Any]:
    """id(marker) → its regex compiled by the regex module, for actor markers not shipped."""
    from oomdoctor.knowledge import builtin

    shipped = builtin()
    if knowledge is shipped:
        return {}
    known = set(shipped.markers)
    user = [m for m in actors if m not in known]
    if not user:
        return {}
    import regex

    out: dict[int, Any] = {}
    for m in user:
        try:
            out[id(m)] = regex.compile(m.match)
        except (regex.error, RecursionError, OverflowError):
            continue  # compiled by re when it was loaded; left to it (no timeout) is no option
    return out


class Detector:
    """Collects votes line by line; ``result()`` decides."""

    def __init__(self, knowledge: Knowledge, clock: PatternClock | None = None) -> None:
        markers = knowledge.markers
        self._text = [m for m in markers if m.where == "text"]
        self._envelope: dict[str, list[EngineMarker]] = {}
        for m in markers:
            if m.where == "envelope":
                self._envelope.setdefault(m.match, []).append(m)
        self._actor = [m for m in markers if m.where == "actor"]
        #: The user's actor regexes (engine-markers.toml), recompiled for the regex module's
        #: timeout and charged to the run's clock: a regex that backtracks exponentially on a
        #: long process name must not stop the run.
        self._user_actor = _user_actor_regexes(knowledge, self._actor)
        self._clock = clock if clock is not None or not self._user_actor else PatternClock()
        self._frame = [m for m in markers if m.where == "frame"]
        self._tally: dict[str, _Tally] = {}
        self._actor_cache: dict[str, tuple[EngineMarker, ...]] = {}
        self._digit_blind = not any(c.isdigit() for m in self._actor for c in m.match)
        #: PIDs of `(Name pid=N)` prefixes and the role their name gives (engine or driver).
        self.actor_roles: dict[int, str] = {}

    # -- votes --------------------------------------------------------------------------------
    def _vote(self, marker: EngineMarker, line: Line | None, what: str, lines: int = 1) -> None:
        tally = self._tally.get(marker.engine)
        if tally is None:
            tally = self._tally[marker.engine] = _Tally()
        tally.score = max(tally.score, marker.strength)
        tally.count += lines
        if line is not None and len(tally.lines) < MAX_EVIDENCE and line not in tally.lines:
            tally.lines.append(line)
            tally.notes.append(what)

    def line(self, line: Line, marked: bool) -> None:
        """A line fed to the assembler; ``marked`` when it holds a text marker's literal."""
        if line.style:
            for m in self._envelope.get(line.style, ()):
                self._vote(m, line, f"its log envelope ({line.style}, line {line.number})")
        if line.actor:
            for m in self._actor_markers(line.actor):
                self._vote(m, line, f"the process name {line.actor} (line {line.number})")
                if m.role and line.actor_pid is not None:
                    self.actor_roles.setdefault(line.actor_pid, m.role)
        if marked:
            text = line.text
            for m in self._text:
                if m.match in text:
                    self._vote(m, line, f"`{m.match}` (line {line.number})")

    def folded(self, folded: Folded) -> None:
        """The votes of lines counted, not assembled (extract/fold.py): their envelopes' and
        process names' votes, and the role each name gives its PID."""
        for style, lines in folded.styles().items():
            for m in self._envelope.get(style, ()):
                self._vote(m, None, "", lines)
        for pid, (actor, lines) in folded.actors.items():
            for m in self._actor_markers(actor):
                self._vote(m, None, "", lines)
                if m.role:
                    self.actor_roles.setdefault(pid, m.role)

    def _actor_markers(self, actor: str) -> tuple[EngineMarker, ...]:
        # `VllmWorker rank=N`: one name per rank. Where no actor regex holds a digit, a name's
        # digits cannot change what matches (\d, \w and [0-9] match any): they are all 0 in
        # the key, so the 100k names of 100k ranks are one entry.
        key = actor.translate(_ZERO_DIGITS) if self._digit_blind else actor
        found = self._actor_cache.get(key)
        if found is None:
            found = tuple(m for m in self._actor if self._actor_matches(m, actor))
            if len(self._actor_cache) >= ACTOR_CACHE:
                self._actor_cache.clear()
            self._actor_cache[key] = found
        return found

    def _actor_matches(self, marker: EngineMarker, actor: str) -> bool:
        timed = self._user_actor.get(id(marker))
        if timed is None:
            return marker.regex is not None and marker.regex.search(actor) is not None
        clock = self._clock
        assert clock is not None
        if clock.exhausted:
            return False
        start = time.perf_counter()
        try:
            return timed.search(actor, timeout=clock.timeout()) is not None
        except TimeoutError:
            clock.timed_out.setdefault(repr(marker.match)[:80], f"the name {actor[:80]!r}")
            return False
        finally:
            clock.charge(
                time.perf_counter() - start,
                f"the process name {actor[:80]!r}",
                f"engine-marker actor regex {marker.match[:80]!r}",
            )

    def frames(self, frames: Sequence[Frame]) -> None:
        """A traceback: its outermost engine frame votes; every stack part it passes is noted."""
        voted = False
        for frame in frames:
            for m in self._frame:
                if m.match not in frame.path:
                    continue
                if m.strength == 0:
                    self._vote(m, frame.line, f"a {m.match} frame")
                elif not voted:
                    number = f", line {frame.line.number}" if frame.line is not None else ""
                    self._vote(m, frame.line, f"the outermost engine frame ({m.match}{number})")
                    voted = True
                    break

    def stats(self, line_count: int) -> None:
        """SGLang's periodic Prefill/Decode batch lines, counted by the fast scan."""
        if line_count:
            tally = self._tally.setdefault("sglang", _Tally())
            tally.score = max(tally.score, 2.0)
            tally.count += line_count
            if not tally.notes:
                tally.notes.append("SGLang's Prefill/Decode batch statistics lines")

    def copy(self) -> Detector:
        """A detector with the same votes so far (reading a live incident must not add votes)."""
        other = object.__new__(Detector)
        other.__dict__.update(self.__dict__)
        other._tally = {}
        for engine, tally in self._tally.items():
            twin = other._tally[engine] = _Tally()
            twin.score, twin.count = tally.score, tally.count
            twin.lines, twin.notes = list(tally.lines), list(tally.notes)
        other.actor_roles = dict(self.actor_roles)
        return other

    # -- decision -----------------------------------------------------------------------------
    def result(self) -> Detected:
        families: dict[str, tuple[float, int]] = {}
        for engine, tally in self._tally.items():
            fam = FAMILY.get(engine)
            if fam is None or tally.score <= 0:
                continue
            score, count = families.get(fam, (0.0, 0))
            families[fam] = (max(score, tally.score), count + tally.count)
        stack = tuple(sorted(e for e in self._tally if e not in FAMILY))
        if not families:
            return Detected(None, stack)
        ranked = sorted(families.items(), key=lambda kv: kv[1], reverse=True)
        best, (score, count) = ranked[0]
        rival = None
        if len(ranked) > 1:
            other, (other_score, other_count) = ranked[1]
            if (other_score, other_count) == (score, count):
                return Detected(
                    None,
                    stack,
                    tuple(self._tally_lines(best) + self._tally_lines(other)),
                    f"both {best} and {other} evidence, equally strong",
                    rival=other,
                )
            if other_score >= 2.0:
                rival = other
        variants = [
            (t.score, t.count, e)
            for e, t in self._tally.items()
            if FAMILY.get(e) == best and e != best and t.score > 0
        ]
        engine = max(variants)[2] if variants else best
        tally = self._tally.get(engine) or self._tally[best]
        why = tally.notes[0] if tally.notes else None
        return Detected(engine, stack, tuple(tally.lines), why, rival)

    def _tally_lines(self, family: str) -> list[Line]:
        lines: list[Line] = []
        for engine, tally in self._tally.items():
            if FAMILY.get(engine) == family:
                lines.extend(tally.lines)
        return lines[:MAX_EVIDENCE]
