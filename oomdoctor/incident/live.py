"""Incremental parsing for live output (`watch`, `diagnose --follow`): bytes in, facts assembled.

The same scanner, extractor and assembler as a file diagnosis; only the line splitting differs:
data arrives in arbitrary chunks, from one or two streams, and lines complete one at a time.
With ``decode`` (``diagnose --follow``), stream 0 is decoded as ``diagnose -`` decodes standard
input (gzip, bzip2, xz, UTF-16/32: read/decode.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from oomdoctor.extract.facts import Extractor
from oomdoctor.incident.assemble import Assembler
from oomdoctor.incident.feed import Feeder
from oomdoctor.knowledge.kinds import FAILURE_KINDS
from oomdoctor.model import Fact, Incident, Line
from oomdoctor.read.decode import Decoder, InputError
from oomdoctor.read.sources import MAX_LINE, ReadStats, read_notices

#: Bytes held to tell the format of a followed stream: enough for magic bytes and the NUL
#: pattern of UTF-16, little enough that a live stream is parsed as it comes.
FOLLOW_SNIFF = 256

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
        decode: bool = False,
    ) -> None:
        self._assembler = assembler
        self._extractor = extractor
        self._scanner = extractor.scanner
        self._feeder = Feeder(extractor, assembler, 0, self._facts)
        self._on_crash = on_crash
        self._partial: dict[int, _Partial] = {}
        self.crash: Line | None = None
        label = assembler.sources[0] if assembler.sources else "<stdin>"
        self._stats = ReadStats(label)
        self._decoder = Decoder(self._stats, head=FOLLOW_SNIFF) if decode else None
        #: Why the stream could not be decoded (a format Python cannot read); the rest is ignored.
        self.input_error: str | None = None

    @property
    def lines(self) -> int:
        return self._feeder.lines

    def feed(self, data: bytes, stream: int = 0) -> None:
        """A chunk of one stream: its complete lines are parsed now, the rest waits."""
        if self._decoder is not None and stream == 0:
            self._stats.bytes_read += len(data)
            self._decoded(self._decoder.feed, data)
            return
        self._lines_of(data, stream)

    def _decoded(self, step: Callable[[bytes], Iterable[bytes]], data: bytes) -> None:
        if self.input_error is not None:
            return
        try:
            for piece in step(data):
                self._lines_of(piece, 0)
        except InputError as exc:
            self.input_error = str(exc)

    def _lines_of(self, data: bytes, stream: int) -> None:
        partial = self._partial.setdefault(stream, _Partial())
        last_nl = data.rfind(b"\n")
        if last_nl < 0:
            if not partial.skipping:
                partial.data += data
                if len(partial.data) > MAX_LINE:
                    self._block(bytes(partial.data[:MAX_LINE]) + b"\n")
                    partial.data.clear()
                    partial.skipping = True
            return
        head, rest = data[: last_nl + 1], data[last_nl + 1 :]
        if partial.skipping:
            head = head[head.find(b"\n") + 1 :]  # the end of a line already cut
            partial.skipping = False
        if partial.data:
            head = bytes(partial.data) + head
            partial.data.clear()
        if head:
            self._block(head)
        if rest:
            partial.data += rest

    def close(self) -> None:
        """End of input: a last line without a newline still counts."""
        if self._decoder is not None:
            decoder = self._decoder
            self._decoded(lambda _: decoder.close(), b"")
        for partial in self._partial.values():
            if partial.data and not partial.skipping:
                self._block(bytes(partial.data) + b"\n")
            partial.data.clear()

    def _block(self, block: bytes) -> None:
        self._feeder.block(self._scanner.scan(block))

    def _facts(self, line: Line, facts: list[Fact]) -> None:
        if self.crash is None and _is_crash(facts):
            self.crash = line
            if self._on_crash is not None:
                self._on_crash(line)

    def incident(self) -> Incident:
        self._assembler.lines_read = self._feeder.lines
        incident = self._assembler.incident()
        notices = self._extractor.notices(self._assembler.sources)
        if self._decoder is not None:
            self._stats.lines = self._feeder.lines
            notices += [n for n in read_notices(self._stats) if not n.endswith("is empty")]
            if self.input_error is not None:
                notices.append(f"{self.input_error}; nothing of it was read")
        return incident._replace(notices=(*incident.notices, *notices)) if notices else incident


def _is_crash(facts: Sequence[Fact]) -> bool:
    return any(f.kind in CRASH_KINDS for f in facts)
