"""Run a server, pass its output through unchanged, and catch the GPU state at the crash.

The child gets its own process group; its stdout and stderr are copied byte for byte, in order,
as they arrive (no line buffering), optionally appended to a log file, and parsed on the way. At
the first crash signature a GPU snapshot is taken in a background thread, before the process
tree goes away. SIGINT/SIGTERM/SIGHUP are forwarded to the child's group; a second Ctrl-C kills it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, BinaryIO

from oomdoctor.incident.live import StreamParser
from oomdoctor.model import Line

READ_SIZE = 1 << 16
#: After the child exits, its children may still hold the pipes: drain them this long at most.
DRAIN_AFTER_EXIT_S = 5.0
#: After SIGTERM is forwarded, give the group this long before SIGKILL.
TERM_TIMEOUT_S = 10.0

Snapshotter = Callable[[], Any]


@dataclass
class Capture:
    """When the crash line arrived and when the GPU snapshot was taken (epoch seconds).

    Give ``crashed`` to the StreamParser as its on_crash callback.
    """

    snapshotter: Snapshotter | None = None
    crash_line: Line | None = None
    crash_time: float | None = None
    snapshot: Any = None  # Snapshot | Unavailable | None
    snapshot_time: float | None = None
    thread: threading.Thread | None = None

    def crashed(self, line: Line) -> None:
        self.crash_line = line
        self.crash_time = time.time()
        snapshotter = self.snapshotter
        if snapshotter is None:
            return

        def run() -> None:
            self.snapshot = snapshotter()
            self.snapshot_time = time.time()

        self.thread = threading.Thread(target=run, name="oomdoctor-snapshot", daemon=True)
        self.thread.start()

    def wait(self, timeout: float = 60.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


@dataclass
class WatchResult:
    status: int  # shell-style: the exit code, or 128 + N when the child died of signal N
    capture: Capture
    reported_early: bool = False  # the diagnosis was printed while a hung child still ran
    output_closed: list[str] = field(default_factory=list)


def shell_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class _Writer:
    """Writes all bytes to a file descriptor; a reader that went away stops only this copy."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except BrokenPipeError:
            self.closed = True
        except OSError:
            self.closed = True


class _Signals:
    """Forward SIGINT/SIGTERM/SIGHUP to the child's process group; a second Ctrl-C kills it."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.interrupts = 0
        self.terminated_at: float | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            self.kill(signal.SIGKILL if self.interrupts > 1 else signal.SIGINT)
        else:
            self.kill(signum)
            if signum == signal.SIGTERM:
                self.terminated_at = time.monotonic()

    def kill(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)


def run(
    command: Sequence[str],
    parser: StreamParser,
    capture: Capture,
    log: BinaryIO | None = None,
    out_fd: int = 1,
    err_fd: int = 2,
    grace_s: float = 30.0,
    on_hang: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> WatchResult:
    """Run ``command`` to the end (or until killed) and return its status and the capture.

    ``on_hang(child)`` is called once, ``grace_s`` after the crash line, if the child still runs;
    afterwards its output is still passed through until it exits (or a signal ends it).
    """
    child = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    assert child.stdout is not None and child.stderr is not None
    writers = {
        child.stdout.fileno(): (_Writer(out_fd, "stdout"), 1),
        child.stderr.fileno(): (_Writer(err_fd, "stderr"), 2),
    }
    reported = False
    exited_at: float | None = None
    selector = selectors.DefaultSelector()
    for fd in writers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    with _Signals(child.pid) as signals:
        while selector.get_map():
            for key, _ in selector.select(timeout=0.2):
                fd = int(key.fd)
                try:
                    data = os.read(fd, READ_SIZE)
                except BlockingIOError:
                    continue
                if not data:
                    selector.unregister(fd)
                    continue
                writer, stream = writers[fd]
                writer.write(data)
                if log is not None:
                    log.write(data)
                parser.feed(data, stream)
            now = time.monotonic()
            if exited_at is None and child.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT_S:
                break  # the child is gone; its own children keep the pipes open
            if signals.terminated_at is not None and now - signals.terminated_at > TERM_TIMEOUT_S:
                signals.kill(signal.SIGKILL)
            if (
                not reported
                and on_hang is not None
                and capture.crash_time is not None
                and time.time() - capture.crash_time > grace_s
                and child.poll() is None
            ):
                capture.wait(5.0)
                on_hang(child)
                reported = True
        returncode = child.wait()
        if signals.terminated_at is not None or signals.interrupts:
            signals.kill(signal.SIGKILL)  # leave nothing of the group behind
    selector.close()
    child.stdout.close()
    child.stderr.close()
    parser.close()
    capture.wait()
    closed = [w.name for w, _ in writers.values() if w.closed]
    return WatchResult(shell_status(returncode), capture, reported, closed)
