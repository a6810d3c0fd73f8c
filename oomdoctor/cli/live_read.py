"""How the reading of a live input ends, so that its report is never lost: at the end of the
input, at SIGINT or SIGTERM, or ``--grace`` seconds after the crash line once the input pauses
(SGLang hangs after a crash: Ctrl-C, or the grace, is the normal way out).

Shared by ``diagnose -`` and ``diagnose --follow``. A second SIGINT or SIGTERM exits at once,
without a report. Only the standard library is imported at module level: ``--help`` stays light.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType, MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from oomdoctor.incident.live import StreamParser
    from oomdoctor.model import Line

#: ``--grace``'s default: seconds after the crash line before a live input is reported on.
#: Long enough for the other ranks' tracebacks, short enough to beat a user's Ctrl-C.
GRACE_S = 5.0
#: A live input is waited on this long at a time (how soon a signal or the grace is noticed).
POLL_S = 0.1
#: The input has paused (``on_pause``) when nothing came for this long.
PAUSE_S = 0.02
#: After the grace, the report waits for a pause of this long in the input: a producer that is
#: still writing fast (``cat`` of a big log) is read to its end.
QUIET_S = 0.2
#: After the first signal, what the input already holds is still read, for at most this long.
DRAIN_S = 0.5
#: The largest read from a live input.
READ_SIZE = 1 << 16
#: CrashWatch's unparsed bytes are dropped past this many (memory stays bounded).
WATCH_BOUND = 8 << 20

_NAMES: Mapping[int, str] = MappingProxyType(
    {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
)


class Source(Protocol):
    """What cli/live_sources.py's sources give: bytes, None (nothing within ``timeout``) or b""
    (the end)."""

    def read(self, size: int, timeout: float) -> bytes | None: ...


class Interrupts:
    """SIGINT and SIGTERM while the context is entered: the first is noted (``received``), and
    whoever reads the live input stops and reports; a second one exits at once (SIGINT: the CLI
    says ``interrupted``, exit 130; SIGTERM: exit 143)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in _NAMES:
                # ignored when we started (a background job of a script, nohup): left so
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Nothing is printed here: the main thread may be in the middle of writing to stderr.
        if self.received is None:
            self.received = signum
            return
        self.__exit__()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)


def signal_name(signum: int | None) -> str:
    return _NAMES.get(signum, f"signal {signum}") if signum else "a signal"


class LiveReader:
    """A source read chunk by chunk until it ends, a signal comes (what the source already holds
    is still read, for DRAIN_S at most), or ``grace_s`` after the crash line (``crashed_at()``,
    monotonic seconds) once the input has paused for QUIET_S. ``reason`` then says which:
    ``"end"``, ``"signal"`` or ``"grace"``. ``on_pause`` runs whenever nothing is waiting to be
    read; ``notify`` hears one line when a signal ends the reading."""

    def __init__(
        self,
        source: Source,
        interrupts: Interrupts,
        grace_s: float | None,
        crashed_at: Callable[[], float | None] = lambda: None,
        on_pause: Callable[[], None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self._source = source
        self._interrupts = interrupts
        self._grace = grace_s
        self._crashed_at = crashed_at
        self._on_pause = on_pause
        self._notify = notify
        self._last = time.monotonic()
        self._drain_until: float | None = None
        self.reason: str | None = None

    def chunk(self, size: int = READ_SIZE) -> bytes:
        """The next bytes of the input; b"" once the reading has ended."""
        while self.reason is None:
            if self._interrupts.received is not None:
                return self._drain(size)
            data = self._source.read(size, 0.0)
            if data is None:  # a pipe is often empty for a moment: the writer refills it
                data = self._source.read(size, PAUSE_S)
            if data is None:
                if self._on_pause is not None:
                    self._on_pause()
                if self._grace_over():
                    self.reason = "grace"
                    break
                data = self._source.read(size, self._wait())
                if data is None:
                    continue
            if not data:
                self.reason = "end"
                break
            self._last = time.monotonic()
            return data
        return b""

    def _drain(self, size: int) -> bytes:
        now = time.monotonic()
        if self._drain_until is None:
            self._drain_until = now + DRAIN_S
            if self._notify is not None:
                self._notify(
                    f"{signal_name(self._interrupts.received)}: reporting on what was read "
                    "(again to quit at once)"
                )
        if now < self._drain_until:
            data = self._source.read(size, 0.0)
            if data:
                return data
        self.reason = "signal"
        return b""

    def _deadline(self) -> float | None:
        crashed = self._crashed_at() if self._grace is not None else None
        return None if crashed is None or self._grace is None else crashed + self._grace

    def _grace_over(self) -> bool:
        deadline = self._deadline()
        now = time.monotonic()
        return deadline is not None and now >= deadline and now - self._last >= QUIET_S

    def _wait(self) -> float:
        deadline = self._deadline()
        if deadline is None:
            return POLL_S
        now = time.monotonic()
        until = max(deadline, self._last + QUIET_S)
        return min(POLL_S, max(until - now, 0.01))


class CrashWatch:
    """When the crash line went by, for ``diagnose -``, whose pipeline finds facts only once it
    holds a block (64 KiB of a pipe's head, 1 MiB of unwrapped lines): too late for a server that
    prints its crash and hangs. A second parser reads the same bytes, but only while the input
    pauses, so a fast producer (``cat`` of a big log) is not parsed twice: past WATCH_BOUND
    unparsed bytes, they are dropped and the parser starts again on what comes next."""

    def __init__(self, new_parser: Callable[[Callable[[Line], None]], StreamParser]) -> None:
        self._new = new_parser
        self._parser: StreamParser | None = None
        self._pending: list[bytes] = []
        self._size = 0
        self.at: float | None = None  # monotonic seconds

    def add(self, data: bytes) -> None:
        if self.at is not None:
            return
        self._pending.append(data)
        self._size += len(data)
        if self._size > WATCH_BOUND:
            self._pending, self._size, self._parser = [], 0, None

    def catch_up(self) -> None:
        if self.at is not None or not self._pending:
            return
        if self._parser is None:
            self._parser = self._new(self._crashed)
        pending, self._pending, self._size = self._pending, [], 0
        for data in pending:
            self._parser.feed(data)
            if self.at is not None:
                break

    def _crashed(self, line: Line) -> None:
        self.at = time.monotonic()


class LiveInput:
    """A live standard input as the pipeline reads it (a binary stream): ``read(size)`` fills as a
    buffered read does, up to ``size`` bytes or what came before the reading ended. Every byte
    also goes to ``watch``, and ``seen`` notes whether anything but whitespace came."""

    def __init__(self, reader: LiveReader, fd: int, watch: CrashWatch | None, seen: Any) -> None:
        self.reader = reader
        self._fd = fd
        self._watch = watch
        self.seen = seen  # cli/inputs.py TextSeen

    def read(self, size: int = -1, /) -> bytes:
        want = size if size >= 0 else 1 << 62
        out = bytearray()
        while len(out) < want:
            data = self.reader.chunk(min(want - len(out), READ_SIZE))
            if not data:
                break
            self.seen.see(data)
            if self._watch is not None:
                self._watch.add(data)
            out += data
        return bytes(out)

    def fileno(self) -> int:
        return self._fd

    def tell(self) -> int:
        return os.lseek(self._fd, 0, os.SEEK_CUR)

    def close(self) -> None:
        """Standard input stays open (the pipeline closes only the files it opened)."""


def stop_notice(reason: str | None, signum: int | None, grace_s: float, label: str) -> str | None:
    """What the report says about a live input whose end it did not see."""
    if reason == "signal":
        return (
            f"{label}: reading stopped at {signal_name(signum)} before the input ended; "
            "the report is on what was read"
        )
    if reason == "grace":
        return (
            f"{label}: the input was still open {grace_s:g} s after the crash line; the report "
            "did not wait for its end (--grace)"
        )
    return None
