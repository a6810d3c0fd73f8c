"""Where output lands: standard streams that may be closed, full or gone, and files replaced
whole.

Nothing here prints or exits; :mod:`oomdoctor.cli.common` turns an :class:`OutputError` into a
one-line message and an exit code. Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Any

#: Mode bits a new ``-o`` file gets before the umask, as ``open(..., "w")`` would give it.
_NEW_FILE_MODE = 0o666


class OutputError(Exception):
    """An output that cannot be written: ``str(exc)`` is the one-line reason."""


def reserve_standard_fds() -> None:
    """Put ``/dev/null`` on any of fds 0, 1 and 2 that is closed.

    A process started with ``>&-`` has no fd 1, and the next file it opens would get that
    number: the server's output (written to fd 1) would then land in a log or report file.
    Python has already set ``sys.stdout`` (or stdin, stderr) to None for a closed fd, which is how
    the commands still tell that the stream is closed.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            # the lowest free number is fd itself, as the lower ones are open by now
            new = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if new != fd:  # pragma: no cover - only if another thread opened files meanwhile
                os.dup2(new, fd)
                os.close(new)


def silence(stream: Any) -> None:
    """Point ``stream``'s fd at ``/dev/null``: what is still buffered, and the interpreter's final
    flush, then go nowhere instead of failing again ("Exception ignored ... BrokenPipeError")."""
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # closed, None, or not a real file (tests)
        return
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd`` (``os.write`` may take only part of it, on a pipe or a
    terminal); a BrokenPipeError or other OSError goes to the caller."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_stream(stream: Any, text: str, name: str = "standard output") -> bool:
    """Write ``text`` to ``stream`` and flush it.

    Returns False when the reader went away (a broken pipe: ``| head``), after silencing the
    stream. Raises OutputError when the stream is closed (None) or the write fails otherwise
    (``/dev/full``).
    """
    if stream is None:
        raise OutputError(f"cannot write to {name}: it is closed")
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # a lone surrogate, or a terminal that cannot show a character
            encoding = getattr(stream, "encoding", None) or "utf-8"
            stream.write(text.encode(encoding, "replace").decode(encoding))
        stream.flush()
    except BrokenPipeError:
        silence(stream)
        return False
    except OSError as exc:
        silence(stream)
        raise OutputError(f"cannot write to {name}: {_reason(exc)}") from None
    return True


def write_file(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to the file ``path`` whole, or raise OutputError.

    A regular file (or a new one) is written to a temporary file in the same folder and renamed
    over ``path``: a reader never sees half a report, and two runs writing the same file leave
    one of the two whole reports, never a splice. The file keeps its permissions (a new one gets
    the umask's). A device or a FIFO (``/dev/stdout``, ``/dev/full``) is written in place, as is a
    file whose folder does not let a temporary file be made.
    """
    target = Path(os.path.realpath(path))  # through a symlink: replace the file, keep the link
    try:
        # the path itself first: /dev/stdout -> /proc/self/fd/1 -> "pipe:[N]" has no real path
        st: os.stat_result | None = Path(path).stat()
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write {path}: it is a directory")
        _write_in_place(path, Path(path), text)
        return
    if st is not None and not os.access(target, os.W_OK):  # as writing it in place would say
        raise OutputError(f"cannot write {path}: {os.strerror(errno.EACCES)}")
    import tempfile  # only a file needs it (it imports shutil, random, ...)

    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        if st is None:
            raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
        _write_in_place(path, target, text)  # a folder we may not add to, a file we may change
        return
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_encode(text))
        tmp.chmod(stat.S_IMODE(st.st_mode) if st is not None else _new_file_mode())
        tmp.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _write_in_place(path: str, target: Path, text: str) -> None:
    try:
        with target.open("wb") as out:
            out.write(_encode(text))
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None


def _encode(text: str) -> bytes:
    """``text`` as bytes; a lone surrogate (a path's undecodable byte) is written back as that
    byte, or as ``?`` when it was not one."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _new_file_mode() -> int:
    """0o666 less the umask (which can be read only by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return _NEW_FILE_MODE & ~mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def same_file(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` name one file (existing or not: then by their paths)."""
    try:
        return Path(a).samefile(b)
    except (OSError, ValueError):
        pass
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False
