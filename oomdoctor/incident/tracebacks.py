"""Tracebacks as excerpts show them: with or without their header, cut before the exception,
or pasted after the message they explain.

One `Stream` per source and process prefix (a vLLM worker, a Ray actor) holds the traceback being
read. A frame opens one as surely as the `Traceback (most recent call last):` header does; the
exception line closes it. A run of frames that ends without its exception (the paste was cut, or
the message was pasted first) is handed back by `close_cut` for the assembler to place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.model import Frame, Line

if TYPE_CHECKING:
    from oomdoctor.incident.launch import FailureBuilder

MAX_FRAMES = 120
#: A frameless failure this close above the first frame of an unfinished run is what the run
#: explains (a message pasted first, or vLLM V0's `Exception in worker ...: <message>` line).
MESSAGE_FIRST_LINES = 4
#: The line just before a traceback (its wrapper: `Stage process thinker failed`) is kept as
#: its opener when it is this close.
OPENER_LINES = 2


class Stream:
    """What one source and process prefix is reading now. (A plain class, not a dataclass:
    defining a dataclass costs most of a millisecond of every start.)"""

    __slots__ = (
        "capture_failed",
        "first_frame",
        "frame_line",
        "frames",
        "header",
        "last_failure",
        "last_line",
        "oom_parts",
        "open",
        "open_oom",
        "open_oom_line",
        "opener",
        "warmup",
    )

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.open = False  # a traceback is being read
        self.header = False  # ... and its header was seen
        self.opener: Line | None = None  # the wrapper line that introduced it
        self.first_frame = -1  # line number of its first frame
        self.frame_line = -1  # line number of the last frame (its code line follows)
        self.last_line: Line | None = None  # the previous line of this stream that was not a frame
        self.warmup = False
        self.capture_failed: Line | None = None  # the line that said a capture failed
        self.open_oom: FailureBuilder | None = None
        self.oom_parts: list[str] = []
        self.open_oom_line = 0
        self.last_failure: FailureBuilder | None = None

    def start(self, header: Line | None) -> None:
        """A traceback header: the wrapper is on the header line itself or just above it."""
        self.frames.clear()
        self.open = True
        self.header = header is not None
        self.opener = self._nearby(header)
        self.first_frame = -1

    def _nearby(self, header: Line | None) -> Line | None:
        if header is not None and header.text.strip() != "Traceback (most recent call last):":
            return header  # `Scheduler hit an exception: Traceback ...`
        last = self.last_line
        anchor = header.number if header is not None else None
        if last is None:
            return None
        if anchor is None or anchor - last.number <= OPENER_LINES:
            return last
        return None

    def add_frame(self, frame: Frame) -> None:
        if not self.open:  # a headerless paste: the frames alone say a traceback is here
            self.start(None)
            if frame.line is not None and self.last_line is not None:
                gap = frame.line.number - self.last_line.number
                self.opener = self.last_line if gap <= OPENER_LINES else None
        if self.first_frame < 0 and frame.line is not None:
            self.first_frame = frame.line.number
        if len(self.frames) >= MAX_FRAMES:
            del self.frames[0]
        self.frames.append(frame)
        if frame.line is not None:
            self.frame_line = frame.line.number

    def add_code(self, code: str) -> None:
        """The source line printed under the last frame (`vision_embedding = self.vpm(`)."""
        if self.frames:
            self.frames[-1] = self.frames[-1]._replace(code=code)

    @property
    def idle(self) -> bool:
        """Nothing open and nothing to attach to: only its last line would be lost."""
        return not (
            self.open
            or self.frames
            or self.open_oom is not None
            or self.oom_parts
            or self.last_failure is not None
            or self.capture_failed is not None
            or self.warmup
        )

    def end(self) -> None:
        self.open = False
        self.header = False
        self.frames.clear()
        self.opener = None
        self.first_frame = -1
        self.warmup = False
        self.capture_failed = None

    def close_cut(self) -> tuple[Frame, ...]:
        """End an unfinished traceback; its frames, if it had any."""
        frames = tuple(self.frames) if self.open else ()
        self.end()
        return frames

    def message_first(self) -> FailureBuilder | None:
        """The frameless failure just above this run, if the run is what explains it."""
        failure = self.last_failure
        if failure is None or failure.frames or self.first_frame < 0:
            return None
        if 0 <= self.first_frame - failure.line.number <= MESSAGE_FIRST_LINES:
            return failure
        return None
