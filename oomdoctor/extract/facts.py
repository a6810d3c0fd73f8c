"""Turn candidate lines into facts: decode, split progress bars, normalise, match signatures."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from oomdoctor import units
from oomdoctor.extract.fold import Folded, Folder
from oomdoctor.extract.normalise import Envelope, InnerMemo, normalise
from oomdoctor.model import Fact, Line, Scalar
from oomdoctor.read.scan import Scanner

#: Evidence text is kept to this many characters; the parsers see the whole line.
MAX_EVIDENCE = 2000
#: The key under which a matcher lists the numbers it refused (units.in_range); not a fact field.
REFUSED = "_refused"
#: Refused numbers named in the notice (the rest are counted).
REFUSED_SHOWN = 3
#: Texts whose facts are remembered: a log of many workers prints each message once per worker.
MEMO_SIZE = 4096
#: What the extractor remembers of a text: its anchors, its facts (kind, data), its refusals,
#: and its facts' kinds where a copy of it may be folded (fold.py; None: it may not).
_Memo = tuple[
    set[str],
    tuple[tuple[str, Mapping[str, Scalar]], ...],
    tuple[str, ...],
    tuple[str, ...] | None,
]
#: The kind of every rule pattern's facts starts so (``pattern:<rule id>.<name>``).
RULE_PATTERN = "pattern:"


def _split_at(head: re.Pattern[str], segment: str) -> list[str]:
    """``segment`` cut before every record head that follows other (non-blank) text."""
    if head.search(segment, 1) is None:  # most lines: one look
        return [segment]
    cuts = [m.start() for m in head.finditer(segment, 1) if not segment[m.start() - 1].isspace()]
    if not cuts:
        return [segment]
    bounds = [0, *cuts, len(segment)]
    return [segment[a:b] for a, b in itertools.pairwise(bounds)]


class Matcher(Protocol):
    """Anything that recognises one kind of fact: built-in signatures and rule patterns."""

    @property
    def kind(self) -> str: ...

    @property
    def anchors(self) -> tuple[str, ...]: ...

    def match(self, text: str) -> Mapping[str, Scalar] | None: ...


class MarkerMatcher:
    """Lines that carry knowledge (engine markers, site and phase marks) become ``marker`` facts,
    so the assembler sees them even when no signature matches; it reads the marks itself."""

    kind = "marker"

    def __init__(self, anchors: Sequence[str]) -> None:
        self.anchors = tuple(anchors)

    def match(self, text: str) -> Mapping[str, Scalar] | None:
        return {}


class SignatureMatcher:
    """Adapts a built-in Signature to the Matcher protocol."""

    def __init__(self, signature: object) -> None:
        from oomdoctor.extract.signatures.base import Signature

        assert isinstance(signature, Signature)
        self._sig = signature

    @property
    def kind(self) -> str:
        return self._sig.kind

    @property
    def anchors(self) -> tuple[str, ...]:
        return self._sig.anchors

    def match(self, text: str) -> Mapping[str, Scalar] | None:
        m = self._sig.pattern.search(text)
        if m is None:
            return None
        data = self._sig.build(m)
        if data is None:
            return None
        return _physical({**data, "_start": m.start()}, m, self._sig.sizes)


def _physical(
    data: dict[str, Scalar], m: re.Match[str], sizes: frozenset[str]
) -> dict[str, Scalar]:
    """The fact's data with every number outside the physical range (units.in_range; sizes in
    GiB to units.MAX_GIB) set to None, and what was refused under REFUSED (``key=text``)."""
    refused = {
        key: raw
        for key, raw in m.groupdict().items()
        if raw is not None and units.refused(raw, gib=key in sizes)
    }
    for key, value in data.items():
        gib = key in sizes or key.endswith("_gib")
        if isinstance(value, int | float) and not units.in_range(value, gib):
            refused.setdefault(key, str(value))
    for key in refused:
        if key in data:
            data[key] = None
    if refused:
        data[REFUSED] = ", ".join(f"{k}={v}" for k, v in refused.items())
    return data


class _Stream:
    __slots__ = ("rank", "ts")

    def __init__(self, rank: str | None = None, ts: str | None = None) -> None:
        self.rank = rank
        self.ts = ts


class Extractor:
    """Stateful over one run: bare continuation lines inherit the rank of their record.

    (A plain class, not a dataclass: defining a dataclass costs about half a millisecond of
    every start.)"""

    def __init__(self, matchers: Sequence[Matcher], pattern_budget: float | None = None) -> None:
        from oomdoctor.rules.clock import PatternClock

        self.matchers = matchers
        #: Seconds all rule patterns together may spend matching in this run (None: no limit),
        #: shared with the user's actor regexes (rules/clock.py). The per-line timeout stops one
        #: catastrophic line; this stops patterns that are merely slow on every one.
        self.pattern_budget = pattern_budget
        self.clock = PatternClock(pattern_budget) if pattern_budget is not None else None
        self._streams: dict[tuple[int, int | None], _Stream] = {}
        self._frame_at: dict[int, int] = {}  # source -> the line number of its last frame
        #: text → (its anchors, its facts as (kind, data), the numbers it refused)
        self._memo: dict[str, _Memo] = {}
        self._inner_memo: InnerMemo = {}  # normalise's: logger envelopes already parsed
        #: past fold.FOLD_AFTER_PIDS processes, the repeated lines of further ones are folded;
        #: the feeder sets ``folder.kept`` (what the assembler handles) and hands them on
        self.folder = Folder()
        self._again: list[tuple[Line, list[Fact]]] = []  # folded lines read after all
        self._order: dict[int, int] = {}
        self.disabled: dict[str, str] = {}  # kind → why
        self._refused: list[tuple[int, int, str]] = []
        self.refused_count = 0
        self._by_anchor: dict[str, list[Matcher]] = {}
        for index, matcher in enumerate(self.matchers):
            for anchor in matcher.anchors:
                self._by_anchor.setdefault(anchor, []).append(matcher)
            self._order[id(matcher)] = index
        self.scanner = Scanner(self._by_anchor)

    def notices(self, labels: Sequence[str]) -> list[str]:
        """What this run's extraction dropped: disabled rule patterns, numbers not believed."""
        out = []
        where = {m.kind: getattr(m, "where", "") for m in self.matchers}
        for kind, why in self.disabled.items():
            at = f" ({where[kind]})" if where.get(kind) else ""
            out.append(
                f"rule pattern {kind[len(RULE_PATTERN) :]} was disabled for this run{at}: {why}"
            )
        if self.clock is not None:
            names = {
                m.kind: f"rule pattern {m.kind[len(RULE_PATTERN) :]}"
                + (f" ({where[m.kind]})" if where.get(m.kind) else "")
                for m in self.matchers
                if m.kind.startswith(RULE_PATTERN)
            }
            out.extend(self.clock.notices(names))
        if self.refused_count:
            shown = "; ".join(
                f"{labels[s] if s < len(labels) else s}:{n} {what}" for s, n, what in self._refused
            )
            more = self.refused_count - len(self._refused)
            out.append(
                f"{self.refused_count} logged number(s) outside the physical range (an infinity, "
                f"NaN, beyond 64 bits, or a size over {units.MAX_GIB:,.0f} GiB) were ignored: {shown}"
                + (f"; and {more} more" if more > 0 else "")
            )
        return out

    def facts(
        self,
        source: int,
        candidates: Iterable[tuple[int, bytes]],
        prefix: re.Pattern[str] | None = None,
        head: re.Pattern[str] | None = None,
    ) -> Iterator[tuple[Line, list[Fact]]]:
        """For each candidate line (or ``\\r`` segment) that yields facts: the line and its facts.

        ``prefix``: the wrapper's prefix learned for this input, stripped from each line.
        ``head``: the record head most of its lines start with; where it appears inside a line
        after other text (a progress bar that lost its ``\\r`` ran into the next record), the
        line is split there."""
        for number, data in candidates:
            raw = data.decode("utf-8", "replace")
            if (
                prefix is None
                and number != self._frame_at.get(source, -2) + 1
                and self.folder.known(source, number, raw, head, self._fold_kinds)
            ):
                continue
            segments = raw.split("\r") if "\r" in raw else [raw]
            if head is not None:
                segments = [p for seg in segments for p in _split_at(head, seg)]
            code = number == self._frame_at.get(source, -2) + 1  # the line under a frame
            for index, segment in enumerate(segments):
                if not segment or (
                    len(segments) > 1 and not code and not self.scanner.has_anchor(segment)
                ):
                    continue
                whole = len(segments) == 1 and prefix is None
                result = self._segment(source, number, index, segment, prefix, whole)
                if self._again:
                    yield from self._again
                    self._again.clear()
                if result is not None:
                    yield result

    def _segment(
        self,
        source: int,
        number: int,
        index: int,
        segment: str,
        prefix: re.Pattern[str] | None,
        whole: bool = False,
    ) -> tuple[Line, list[Fact]] | None:
        env = normalise(segment, prefix, self._inner_memo)
        key = (source, env.actor_pid)
        if env.actor_pid is not None and key not in self.folder.detailed:
            self._fold_or_detail(source, number, index, segment, prefix, whole, env)
            if key not in self.folder.detailed:
                return None  # folded
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream()
        if env.enveloped:
            stream.rank, stream.ts = env.rank, env.ts or stream.ts
        text = env.text
        memo = self._memo.get(text)
        if memo is None:
            anchors = self.scanner.anchors_in(text)
            if not anchors:  # a frame's code line, say: the next one like it is told at once
                self._remember(text, anchors, (), ())
        else:
            anchors = memo[0]
        code = not anchors and number == self._frame_at.get(source, -2) + 1
        if not anchors and not code:
            return None
        line = Line(
            source=source,
            number=number,
            seq=(source << 48) | (number << 8) | min(index, 255),
            text=text,
            raw=segment[:MAX_EVIDENCE],
            rank=env.rank if env.enveloped else stream.rank,
            ts=env.ts if env.enveloped else (env.ts or stream.ts),
            actor_pid=env.actor_pid,
            level=env.level,
            style=env.style,
            actor=env.actor,
            logger=env.logger,
        )
        if code:  # the source line under a frame: the assembler attaches it to the frame
            return line, [Fact("code", line)]
        if memo is not None:  # the same text was matched before (another worker's line)
            for refused in memo[2]:
                self._refuse(source, number, refused)
            facts = [Fact(kind, line, found) for kind, found in memo[1]]
        else:
            facts = self._match(source, number, text, line, anchors)
        if any(f.kind == "frame" for f in facts):
            self._frame_at[source] = number
        return (line, facts) if facts else None

    def _fold_or_detail(
        self,
        source: int,
        number: int,
        index: int,
        segment: str,
        prefix: re.Pattern[str] | None,
        whole: bool,
        env: Envelope,
    ) -> None:
        """A line of a process not read in detail: fold it (fold.py), or read the process in
        detail from now on, starting with its last folded line (``_again``)."""
        assert env.actor_pid is not None
        key = (source, env.actor_pid)
        memo = self._memo.get(env.text)
        kinds = memo[3] if memo is not None else None
        if self.folder.fold(key, (env.actor, env.style), kinds, (number, index, segment)):
            if whole and kinds is not None:  # a prefix and a text: its copies fold at once
                self.folder.remember(segment, env.style, kinds)
            return
        again = self.folder.again(key)
        if again is not None:  # the line before this one may open its traceback: read it
            result = self._segment(source, again[0], again[1], again[2], prefix)
            if result is not None:
                self._again.append(result)
                line = result[0]
                memo = self._memo.get(line.text)
                self.folder.unfold(key[1], line.actor, line.style, memo[3] if memo else None)

    def _fold_kinds(self, text: str) -> tuple[str, ...] | None:
        """The kinds a message folds as, where it was read before (None: it does not fold)."""
        memo = self._memo.get(text)
        return memo[3] if memo is not None else None

    def take_folded(self) -> Folded | None:
        """What was folded since the last call (None: nothing)."""
        return self.folder.take()

    def _match(
        self, source: int, number: int, text: str, line: Line, anchors: set[str]
    ) -> list[Fact]:
        """The facts of a text, by every matcher one of its anchors names; remembered for the
        text (MEMO_SIZE texts) unless a rule pattern, whose time is budgeted, took part."""
        candidates = {id(m): m for a in anchors for m in self._by_anchor.get(a, ())}
        refusals: list[str] = []
        budgeted = False
        facts: list[Fact] = []
        for mid in sorted(candidates, key=self._order.__getitem__):  # registration order
            matcher = candidates[mid]
            kind = matcher.kind
            if kind in self.disabled:
                continue
            clock = self.clock if kind.startswith(RULE_PATTERN) else None
            budgeted = budgeted or kind.startswith(RULE_PATTERN)
            if clock is not None and clock.exhausted:
                continue
            start = time.perf_counter() if clock is not None else 0.0
            try:
                within = getattr(matcher, "match_within", None) if clock is not None else None
                found = within(text, clock.timeout()) if within and clock else matcher.match(text)
            except TimeoutError:
                self.disabled[kind] = f"its regex timed out on line {number}"
                continue
            finally:
                if clock is not None:
                    clock.charge(time.perf_counter() - start, f"line {number}", kind)
            if found is not None and REFUSED in found:
                refusals.append(str(found[REFUSED]))
                self._refuse(source, number, refusals[-1])
                found = {k: v for k, v in found.items() if k != REFUSED}
            if found is not None:
                facts.append(Fact(kind, line, found))
        if not budgeted and not self.disabled:
            self._remember(text, anchors, tuple((f.kind, f.data) for f in facts), tuple(refusals))
        return facts

    def _remember(
        self,
        text: str,
        anchors: set[str],
        facts: tuple[tuple[str, Mapping[str, Scalar]], ...],
        refusals: tuple[str, ...],
    ) -> None:
        if len(self._memo) >= MEMO_SIZE:
            self._memo.clear()
        kinds = tuple(kind for kind, _ in facts)
        self._memo[text] = (anchors, facts, refusals, self.folder.fold_kinds(kinds, bool(refusals)))

    def _refuse(self, source: int, number: int, what: str) -> None:
        self.refused_count += 1
        if len(self._refused) < REFUSED_SHOWN:
            self._refused.append((source, number, what[:200]))
