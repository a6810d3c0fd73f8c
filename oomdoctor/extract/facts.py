"""Turn candidate lines into facts: decode, split progress bars, normalise, match signatures."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from oomdoctor.extract.normalise import normalise
from oomdoctor.model import Fact, Line, Scalar
from oomdoctor.read.scan import Scanner

#: Evidence text is kept to this many characters; the parsers see the whole line.
MAX_EVIDENCE = 2000
#: A process prefix in the middle of a line: a tqdm bar that lost its `\r` runs straight into the
#: next record (`... 79.11it/s](EngineCore_DP0 pid=10311) ERROR ...`). The line is split there.
_EMBEDDED_PREFIX = re.compile(
    r"(?<=[^\s(])(?=\((?:[A-Za-z][\w.\-]*(?: rank=\d+)?) pid=\d+(?:, ip=[^)]*)?\) )"
)


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
        return {**data, "_start": m.start()}


@dataclass
class _Stream:
    rank: str | None = None
    ts: str | None = None


@dataclass
class Extractor:
    """Stateful over one run: bare continuation lines inherit the rank of their record."""

    matchers: Sequence[Matcher]
    scanner: Scanner = field(init=False)
    _by_anchor: dict[str, list[Matcher]] = field(init=False)
    _streams: dict[tuple[int, int | None], _Stream] = field(init=False, default_factory=dict)
    _order: dict[int, int] = field(init=False, default_factory=dict)
    disabled: dict[str, str] = field(init=False, default_factory=dict)  # kind → why

    def __post_init__(self) -> None:
        self._by_anchor = {}
        for index, matcher in enumerate(self.matchers):
            for anchor in matcher.anchors:
                self._by_anchor.setdefault(anchor, []).append(matcher)
            self._order[id(matcher)] = index
        self.scanner = Scanner(self._by_anchor)

    def facts(
        self, source: int, candidates: Iterable[tuple[int, bytes]]
    ) -> Iterator[tuple[Line, list[Fact]]]:
        """For each candidate line (or ``\\r`` segment) that yields facts: the line and its facts."""
        for number, data in candidates:
            raw = data.decode("utf-8", "replace")
            segments = raw.split("\r") if "\r" in raw else [raw]
            if "pid=" in raw:
                segments = [p for seg in segments for p in _EMBEDDED_PREFIX.split(seg)]
            for index, segment in enumerate(segments):
                if not segment or (len(segments) > 1 and not self.scanner.has_anchor(segment)):
                    continue
                result = self._segment(source, number, index, segment)
                if result is not None:
                    yield result

    def _segment(
        self, source: int, number: int, index: int, segment: str
    ) -> tuple[Line, list[Fact]] | None:
        env = normalise(segment)
        key = (source, env.actor_pid)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream()
        if env.enveloped:
            stream.rank, stream.ts = env.rank, env.ts or stream.ts
        text = env.text
        anchors = self.scanner.anchors_in(text)
        if not anchors:
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
        candidates = {id(m): m for a in anchors for m in self._by_anchor.get(a, ())}
        facts: list[Fact] = []
        for mid in sorted(candidates, key=self._order.__getitem__):  # registration order
            matcher = candidates[mid]
            if matcher.kind in self.disabled:
                continue
            try:
                found = matcher.match(text)
            except TimeoutError:
                self.disabled[matcher.kind] = f"its regex timed out on line {number}"
                continue
            if found is not None:
                facts.append(Fact(matcher.kind, line, found))
        return (line, facts) if facts else None
