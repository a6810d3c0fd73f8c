"""Where live input comes from: a pipe (or any descriptor ``select`` can wait on), and a log file
followed as ``tail -F`` follows it.

A source's ``read(size, timeout)`` gives the bytes that are there (at most ``size``), waiting up
to ``timeout`` seconds for some: ``None`` when none came in that time, ``b""`` at the end of the
input. A followed file has no end: it may still grow. Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable
from pathlib import Path

#: A followed file that has nothing new is looked at again this often (``tail -F``: 1 s).
FILE_POLL_S = 0.05
#: The bytes just before the position of a followed file are checked against what was read
#: there before each read: this many.
TAIL_BYTES = 64


class PipeSource:
    """An open descriptor read as it flows: a pipe, a terminal, a socket, or a regular file (which
    ``select`` always calls ready: it is read to its end at once)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        #: Why reading stopped early (an I/O error); the bytes read before it still count.
        self.error: str | None = None

    def read(self, size: int, timeout: float) -> bytes | None:
        try:
            ready, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
        except (OSError, ValueError):  # not a descriptor select takes: read it as it comes
            ready = [self.fd]
        if not ready:
            return None
        try:
            return os.read(self.fd, size)
        except BlockingIOError:  # another reader took what was there
            return None
        except OSError as exc:  # EIO from a terminal that went away, ...
            self.error = exc.strerror or str(exc)
            return b""


#: Told what happened to a followed file: "replaced" (rotated, or another file renamed over
#: it) or "truncated".
OnFileEvent = Callable[[str], None]


class FollowedFile:
    """A regular file followed by name, from its first byte, as ``tail -F`` follows it.

    The open file is read as it grows. At its end the name is looked at again: when it names
    another file (the log was rotated or replaced), what the old file still holds is read, then
    the new one from its start; when the file is shorter than what was read (truncated, as
    ``logrotate``'s copytruncate does), it is read again from its start; so it is when the bytes
    before the position changed (truncated, then grown past it before it was looked at). A name
    that names no file for a while (between a rotation's rename and the new file) keeps the old
    file open.
    """

    def __init__(self, path: str, on_event: OnFileEvent | None = None) -> None:
        self.path = path
        self._on_event = on_event
        self.fd = os.open(path, os.O_RDONLY)
        self._id = _identity(os.fstat(self.fd))
        self._pos = 0
        self._last = b""  # the last bytes read, to tell a file that was rewritten
        self.error: str | None = None

    def read(self, size: int, timeout: float) -> bytes | None:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            data = self._read(size)
            if data:
                return data
            if self._moved():
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, FILE_POLL_S))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def _read(self, size: int) -> bytes:
        try:
            if self._rewritten():
                self._restart("truncated")
            data = os.read(self.fd, size)
        except OSError as exc:  # EIO from a failing disk or a network file system
            self.error = exc.strerror or str(exc)
            return b""
        self._pos += len(data)
        self._last = (self._last + data)[-TAIL_BYTES:]
        return data

    def _rewritten(self) -> bool:
        """Whether the bytes just before the position are no longer those read there: the file
        was truncated and has grown past the position again since it was last looked at."""
        if not self._last:
            return False
        return os.pread(self.fd, len(self._last), self._pos - len(self._last)) != self._last

    def _restart(self, event: str) -> None:
        os.lseek(self.fd, 0, os.SEEK_SET)
        self._pos, self._last = 0, b""
        self._tell(event)

    def _moved(self) -> bool:
        """At the end of the open file: switch to a new file under the name, or go back to the
        start of a truncated one. True when there may be something to read now."""
        try:
            named = _identity(Path(self.path).stat())
        except OSError:
            named = None  # renamed away, the new file not made yet
        if named is not None and named != self._id:
            if self._size() > self._pos:  # the writer added to the old file meanwhile
                return True
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return False
            os.close(self.fd)
            self.fd, self._id, self._pos, self._last = fd, _identity(os.fstat(fd)), 0, b""
            self._tell("replaced")
            return True
        if self._size() < self._pos:
            self._restart("truncated")
            return True
        return False

    def _size(self) -> int:
        try:
            return os.fstat(self.fd).st_size
        except OSError:
            return self._pos

    def _tell(self, event: str) -> None:
        if self._on_event is not None:
            self._on_event(event)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)
