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

from oomdoctor.cli.streams import write_all
from oomdoctor.incident.live import StreamParser
from oomdoctor.model import Line

READ_SIZE = 1 << 16
#: After the child exits, the processes it started may still hold the pipes (and still print):
#: their output is passed through until every pipe closes, but this long at most.
DRAIN_AFTER_EXIT_S = 60.0
#: After SIGTERM is forwarded, give the group this long before SIGKILL.
TERM_TIMEOUT_S = 10.0
#: When watch itself fails, the server gets this long after SIGTERM (then SIGKILL).
STOP_TIMEOUT_S = 3.0

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
    #: processes of the child's group that still held its output when DRAIN_AFTER_EXIT_S ran out
    held_open: tuple[int, ...] | None = None


def shell_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


#: Told once about each copy that stopped for a reason other than a reader that went away:
#: (which copy: "stdout", "stderr" or "log"; the error).
OnCopyError = Callable[[str, OSError], None]


class _Writer:
    """Writes all bytes to a file descriptor; a reader that went away, or a write that fails (a
    full disk), stops only this copy. ``on_error`` hears of a failure other than a broken pipe,
    once."""

    def __init__(self, fd: int, name: str, on_error: OnCopyError | None = None) -> None:
        self.fd = fd
        self.name = name
        self.on_error = on_error
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            write_all(self.fd, data)
        except BrokenPipeError:
            self.closed = True
        except OSError as exc:
            self.closed = True
            if self.on_error is not None:
                self.on_error(self.name, exc)


class _Signals:
    """Forward SIGINT/SIGTERM/SIGHUP to the child's process group; a second Ctrl-C kills it, and
    so does a timer ``term_timeout_s`` after SIGTERM. The timer is a thread of its own: the main
    loop may be stuck writing to a reader that stopped reading, and the group must still go."""

    def __init__(self, pgid: int, term_timeout_s: float = TERM_TIMEOUT_S) -> None:
        self.pgid = pgid
        self.term_timeout_s = term_timeout_s
        self.interrupts = 0
        self.terminated_at: float | None = None
        self._old: dict[int, Any] = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._timer is not None:
            self._timer.cancel()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            self.kill(signal.SIGKILL if self.interrupts > 1 else signal.SIGINT)
        else:
            self.kill(signum)
            if signum == signal.SIGTERM and self.terminated_at is None:
                self.terminated_at = time.monotonic()
                self._timer = threading.Timer(self.term_timeout_s, self.kill, (signal.SIGKILL,))
                self._timer.daemon = True
                self._timer.start()

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
    on_error: OnCopyError | None = None,
    drain_s: float = DRAIN_AFTER_EXIT_S,
    term_timeout_s: float = TERM_TIMEOUT_S,
) -> WatchResult:
    """Run ``command`` to the end (or until killed) and return its status and the capture.

    After the child exits, output goes on being passed through until every copy of its pipes
    is closed (a process it started may print later), for ``drain_s`` seconds at most;
    ``held_open`` then names the processes of its group that still held them.

    ``on_hang(child)`` is called once, ``grace_s`` after the crash line, if the child still runs;
    afterwards its output is still passed through until it exits (or a signal ends it). A copy
    that cannot be written (stdout, stderr, ``log``) stops, ``on_error`` is told once, and the
    others go on. Whatever goes wrong here, the child's process group is not left running.
    """
    selector = selectors.DefaultSelector()
    try:
        child = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except BaseException:
        selector.close()
        raise
    assert child.stdout is not None and child.stderr is not None
    try:
        return _supervise(
            child,
            selector,
            parser,
            capture,
            log,
            (out_fd, err_fd),
            grace_s,
            on_hang,
            on_error,
            (drain_s, term_timeout_s),
        )
    finally:
        if child.poll() is None:  # an error on the way out: take the server down with us
            _stop(child)
        selector.close()
        child.stdout.close()
        child.stderr.close()


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's group, SIGKILL if it is still there after a moment."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        try:
            child.wait(STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _supervise(
    child: subprocess.Popen[bytes],
    selector: selectors.BaseSelector,
    parser: StreamParser,
    capture: Capture,
    log: BinaryIO | None,
    fds: tuple[int, int],
    grace_s: float,
    on_hang: Callable[[subprocess.Popen[bytes]], None] | None,
    on_error: OnCopyError | None,
    limits: tuple[float, float],
) -> WatchResult:
    assert child.stdout is not None and child.stderr is not None
    out_fd, err_fd = fds
    drain_s, term_timeout_s = limits
    held_open: tuple[int, ...] | None = None
    writers = {
        child.stdout.fileno(): (_Writer(out_fd, "stdout", on_error), 1),
        child.stderr.fileno(): (_Writer(err_fd, "stderr", on_error), 2),
    }
    copy = _Writer(log.fileno(), "log", on_error) if log is not None else None
    reported = False
    exited_at: float | None = None
    for fd in writers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    with _Signals(child.pid, term_timeout_s) as signals:
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
                if copy is not None:
                    copy.write(data)
                parser.feed(data, stream)
            now = time.monotonic()
            if exited_at is None and child.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > drain_s:
                held_open = group_members(child.pid)  # they keep the pipes open; we go
                break
            if signals.terminated_at is not None and now - signals.terminated_at > term_timeout_s:
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
    parser.close()
    capture.wait()
    closed = [w.name for w, _ in writers.values() if w.closed]
    return WatchResult(shell_status(returncode), capture, reported, closed, held_open)


def group_members(pgid: int) -> tuple[int, ...]:
    """The processes still in process group ``pgid`` (from /proc; empty where there is none)."""
    from pathlib import Path

    members = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text("utf-8", "replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid):
            members.append(int(entry.parent.name))
    return tuple(sorted(members))
