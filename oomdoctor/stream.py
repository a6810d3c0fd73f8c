"""Incremental parsing for live output (`watch`, `diagnose --follow`): bytes in, facts assembled.

The same scanner, extractor and assembler as a file diagnosis; only the line splitting differs:
data arrives in arbitrary chunks, from one or two streams, and lines complete one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from oomdoctor.extract import Extractor
from oomdoctor.incident import Assembler
from oomdoctor.kinds import FAILURE_KINDS
from oomdoctor.model import Fact, Incident, Line
from oomdoctor.reader import MAX_LINE

#: Facts that mean "the server is going down": take the GPU snapshot now.
CRASH_KINDS = FAILURE_KINDS | {"crash_wrapper", "sigquit", "warmup_failed"}


@dataclass
class _Partial:
    data: bytearray = field(default_factory=bytearray)
    skipping: bool = False  # the rest of an over-long line is being dropped


class StreamParser:
    """Feed chunks of one or more streams; lines are numbered in the order they complete."""

    def __init__(
        self,
        extractor: Extractor,
        assembler: Assembler,
        on_crash: Callable[[Line], None] | None = None,
    ) -> None:
        self._extractor = extractor
        self._assembler = assembler
        self._on_crash = on_crash
        self._partial: dict[int, _Partial] = {}
        self.lines = 0
        self.crash: Line | None = None

    def feed(self, data: bytes, stream: int = 0) -> None:
        partial = self._partial.setdefault(stream, _Partial())
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                rest = data[start:]
                if not partial.skipping:
                    partial.data += rest
                    if len(partial.data) > MAX_LINE:
                        self._line(bytes(partial.data[:MAX_LINE]))
                        partial.data.clear()
                        partial.skipping = True
                return
            piece = data[start:nl]
            if partial.skipping:
                partial.skipping = False
            else:
                if partial.data:
                    partial.data += piece
                    piece = bytes(partial.data)
                    partial.data.clear()
                self._line(piece)
            start = nl + 1

    def close(self) -> None:
        """End of input: a last line without a newline still counts."""
        for partial in self._partial.values():
            if partial.data and not partial.skipping:
                self._line(bytes(partial.data))
            partial.data.clear()

    def _line(self, raw: bytes) -> None:
        self.lines += 1
        if not self._extractor.scanner.matches(raw):
            return
        for line, facts in self._extractor.facts(0, [(self.lines, raw)]):
            self._assembler.feed(line, facts)
            if self.crash is None and _is_crash(facts):
                self.crash = line
                if self._on_crash is not None:
                    self._on_crash(line)

    def incident(self) -> Incident:
        self._assembler.lines_read = self.lines
        return self._assembler.incident()


def _is_crash(facts: Sequence[Fact]) -> bool:
    return any(f.kind in CRASH_KINDS for f in facts)
