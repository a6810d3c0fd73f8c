"""Bounded reads of what a user names: a file that must be a regular one, a subprocess's output,
an NVML call. Each has a size cap or a deadline and fails with one line that says why.

A config.json or a rules file that is a symlink to /dev/zero would otherwise grow memory without
end, a FIFO would block the open forever, a flooding ``nvidia-smi`` would fill memory, and a hung
NVML (after an Xid error) would stop the whole run. Nothing here raises anything but
``BoundedError`` (or returns a value saying the call did not finish).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

if TYPE_CHECKING:  # subprocess, selectors and threading are imported where they are used
    import subprocess

T = TypeVar("T")

#: A model config, a safetensors index, a rules or knowledge TOML: none is near this size.
CONFIG_BYTES = 16 << 20
#: What a subprocess (nvidia-smi) may print before it is stopped.
OUTPUT_BYTES = 64 << 20


class BoundedError(Exception):
    """A read refused or cut short; the message is one line, naming the file or command."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "of another kind"


def read_regular(
    path: Path, limit: int = CONFIG_BYTES, pipes: bool = False, timeout: float = 30.0
) -> bytes:
    """The bytes of ``path``, which must be a regular file (after symlinks) of at most ``limit``
    bytes. Opened non-blocking, so a FIFO is refused at once instead of waiting for a writer.

    ``pipes``: a pipe is read too (``--snapshot <(nvidia-smi -q -x)``), for at most ``timeout``
    seconds; devices and sockets are refused all the same."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise BoundedError(f"{path}: no such file") from None
    except OSError as exc:
        raise BoundedError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) and pipes:
            data = _read_pipe(fd, path, limit, timeout)
        elif not stat.S_ISREG(mode):
            raise BoundedError(f"{path}: is {_kind(mode)}, not a regular file; refused")
        else:
            os.set_blocking(fd, True)
            data = _read_fd(fd, limit)
    except OSError as exc:
        raise BoundedError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BoundedError(f"{path}: larger than {_size(limit)}; refused")
    return data


def _read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes (one more tells the caller the file is too large)."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_pipe(fd: int, path: Path, limit: int, timeout: float) -> bytes:
    import select
    import time

    chunks: list[bytes] = []
    total = 0
    deadline = time.monotonic() + timeout
    try:  # non-blocking: end of file at once means no process has it open for writing
        first = os.read(fd, 1 << 16)
    except BlockingIOError:
        first = None
    if first == b"":
        raise BoundedError(f"{path}: a FIFO that no process writes to; refused")
    if first:
        chunks.append(first)
        total = len(first)
    while total <= limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise BoundedError(f"{path}: a pipe that did not end within {timeout:g} s; refused")
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_text(path: Path, limit: int = CONFIG_BYTES) -> str:
    """``read_regular`` decoded as UTF-8 (BoundedError when it is not)."""
    data = read_regular(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundedError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


class Completed(NamedTuple):
    """A finished subprocess: its status and output (each capped at the run's limit)."""

    returncode: int
    stdout: bytes
    stderr: bytes


def run_capped(argv: Sequence[str], timeout: float, limit: int = OUTPUT_BYTES) -> Completed:
    """Run ``argv`` in its own process group; BoundedError when it cannot start, runs past
    ``timeout`` seconds, or prints more than ``limit`` bytes (the group is killed then)."""
    import selectors
    import subprocess
    import time

    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise BoundedError(f"{argv[0]}: cannot run: {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    out: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    total = 0
    why: str | None = None
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            for fd in out:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map() and why is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    why = f"gave no full answer within {timeout:g} s"
                    break
                for key, _ in selector.select(left):
                    fd = int(key.fd)
                    data = os.read(fd, 1 << 16)
                    if not data:
                        selector.unregister(fd)
                        continue
                    total += len(data)
                    if total > limit:
                        why = f"printed more than {_size(limit)}"
                        break
                    out[fd].append(data)
        if why is None:
            try:
                returncode = proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                why = f"did not exit within {timeout:g} s"
        if why is not None:
            _kill(proc)
            raise BoundedError(f"{argv[0]} {why}; stopped")
    finally:
        if proc.poll() is None:
            _kill(proc)
        proc.stdout.close()
        proc.stderr.close()
    return Completed(returncode, b"".join(out[out_fd]), b"".join(out[err_fd]))


def _kill(proc: subprocess.Popen[bytes]) -> None:
    import contextlib
    import signal
    import subprocess

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


class TimedOut(Generic[T]):
    """A call that did not return within its deadline (it goes on in a daemon thread)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def call_with_timeout(
    fn: Callable[[], T], timeout: float, name: str = "oomdoctor-call"
) -> T | TimedOut[T]:
    """``fn()`` in a daemon thread, or TimedOut when it has not returned within ``timeout``
    seconds. For C calls that can hang in the driver (NVML after an Xid error): the thread
    cannot be stopped, but the run goes on without it and exits without waiting for it.
    An exception ``fn`` raises is raised here."""
    import threading

    box: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return TimedOut(timeout)
    if error:
        raise error[0]
    return box[0]


#: JSON nested deeper than this is refused (a model config needs four or five levels).
JSON_DEPTH = 200


def read_json(path: Path, limit: int = CONFIG_BYTES) -> object:
    """A JSON file read through ``read_text``; BoundedError for bad JSON, nesting deeper than
    JSON_DEPTH, or a number that is not finite (``NaN``, ``Infinity``, ``1e400``)."""
    import json

    text = read_text(path, limit)
    depth = _json_depth(text)
    if depth > JSON_DEPTH:
        raise BoundedError(f"{path}: JSON nested more than {JSON_DEPTH} deep; refused")

    def finite(literal: str) -> float:
        value = float(literal)
        if value in (float("inf"), float("-inf")):
            raise _NotFinite(literal)
        return value

    def constant(literal: str) -> float:
        raise _NotFinite(literal)

    try:
        return json.loads(text, parse_float=finite, parse_constant=constant)
    except _NotFinite as exc:
        raise BoundedError(f"{path}: the number {str(exc)[:40]} is not finite; refused") from None
    except (ValueError, RecursionError) as exc:
        raise BoundedError(f"{path}: cannot read it as JSON: {exc}") from None


class _NotFinite(Exception):
    pass


def _json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings (a linear scan, no recursion)."""
    import re

    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        token = m.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest
