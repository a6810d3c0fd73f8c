"""Read inputs as a stream of byte blocks that end on line boundaries.

Files and ``-`` (stdin), plain or as read/decode.py decodes them (gzip, bzip2, xz, zstd where
Python has it; UTF-16/32 with or without a byte-order mark: told by the first bytes, not the
name). Memory stays bounded: blocks have a fixed size, a line longer than ``max_line`` is cut,
with the cut counted, never buffered whole, and decompressed output has a budget.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from oomdoctor.read.decode import (
    BLOCK_SIZE,
    SNIFF_BYTES,
    Budget,
    Decoder,
    InputError,
    binary_kind,
    needs_decoding,
    refusal,
)


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


MAX_LINE = 1 << 20
#: The notice for an input of 0 bytes (the CLI tells empty inputs by it).
EMPTY_NOTICE = "{label}: the input is empty"
__all__ = [
    "BINARY_NOTICE",
    "BLOCK_SIZE",
    "EMPTY_NOTICE",
    "MAX_LINE",
    "Budget",
    "InputError",
    "ReadStats",
    "Window",
    "binary_inputs",
    "iter_blocks",
    "label",
    "merge_stats",
    "open_source",
    "plain_file",
    "read_notices",
]


@dataclass
class ReadStats:
    """What reading one source ran into; turned into notices by the caller."""

    name: str
    bytes_read: int = 0
    lines: int = 0  # set by whoever scans the blocks (the reader does not count them)
    cut_lines: int = 0
    gzip_truncated: bool = False
    read_error: str | None = None
    compression: str | None = None  # "gzip", "bzip2", "xz", "zstd"
    truncated: bool = False  # the compressed stream ends before its end mark
    encoding: str | None = None  # "UTF-16", "UTF-16-LE", "UTF-32-BE", ... (converted to UTF-8)
    budget_stop: int | None = None  # decompressed bytes when the budget stopped the reading
    budget_why: str | None = None  # the limit it passed (read/decode.py Budget)
    binary: str | None = None  # what the input is when it is no text ("an ELF executable ...")


def label(name: str) -> str:
    """How an input is named in reports and notices: ``<stdin>`` for ``-``, and a file name
    whose undecodable bytes (surrogate escapes of os.fsdecode) read as ``\\xNN``, so that every
    output, JSON included, can encode it."""
    if name == "-":
        return "<stdin>"
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no file system byte made
        raw = name.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


def open_source(name: str, stdin: BinaryIO | None = None) -> BinaryIO:
    """Open ``name`` (``-`` is stdin) for binary reading, or raise InputError with the reason."""
    if name == "-":
        if stdin is None:
            raise InputError("no standard input to read")
        return stdin
    path = Path(name)
    shown = label(name)
    try:
        if path.is_dir():
            raise InputError(f"{shown}: is a directory")
        stream = path.open("rb")
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except PermissionError:
        raise InputError(f"{shown}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{shown}: {exc.strerror or exc}") from None
    why = _device(stream, shown) or _refused(stream, shown)
    if why is not None:
        stream.close()
        raise InputError(why)
    return stream


def _device(stream: BinaryIO, name: str) -> str | None:
    """Why a device is not read as a log: /dev/zero or /dev/urandom never end (a terminal, a
    pipe or a FIFO is read; they end when their writer does)."""
    import os
    import stat

    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError):
        return None
    if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and not os.isatty(fd):
        kind = "a character device" if stat.S_ISCHR(mode) else "a block device"
        return f"{name}: is {kind}, not a log file; refused"
    return None


def plain_file(path: Path) -> bool:
    """Whether a file's bytes are read as they are (not compressed, not UTF-16/32), so that
    byte ranges of it can be scanned on their own (read/parallel.py)."""
    try:
        with path.open("rb") as fh:
            return not needs_decoding(fh.read(SNIFF_BYTES))
    except OSError:
        return False


def _refused(stream: BinaryIO, name: str) -> str | None:
    """Why a regular file cannot be read (a compressed format Python cannot decode), from its
    first bytes; pipes and devices are told when they are read (``iter_blocks``)."""
    try:
        if not stream.seekable():
            return None
        head = stream.read(16)
        stream.seek(0)
    except OSError:
        return None  # reading reports it
    return refusal(head, name)


class _Transform(io.RawIOBase):
    """A raw stream that transforms another piece by piece (subclasses define ``_produce``).

    Output is handed out from an offset into the current piece, never by re-slicing it, and each
    piece is at most about BLOCK_SIZE, so memory stays flat whatever the expansion ratio.
    """

    def __init__(self, raw: _Readable) -> None:
        self._raw = raw
        self._pending = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def _produce(self) -> bytes:
        """The next piece of output; set ``self._done`` when the input is exhausted."""
        raise NotImplementedError

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while self._pos >= len(self._pending) and not self._done:
            self._pending, self._pos = self._produce(), 0
        n = min(len(buffer), len(self._pending) - self._pos)
        buffer[:n] = memoryview(self._pending)[self._pos : self._pos + n]
        self._pos += n
        return n


class _Decoded(_Transform):
    """A stream decoded by read/decode.Decoder, piece by piece."""

    def __init__(self, raw: _Readable, decoder: Decoder) -> None:
        super().__init__(raw)
        self._pieces = self._generate(decoder)

    def _generate(self, decoder: Decoder) -> Iterator[bytes]:
        while not decoder.done:
            chunk = self._raw.read(BLOCK_SIZE)
            if not chunk:
                break
            yield from decoder.feed(chunk)
        yield from decoder.close()

    def _produce(self) -> bytes:
        piece = next(self._pieces, None)
        if piece is None:
            self._done = True
            return b""
        return piece


def _sniff(stream: _Readable, stats: ReadStats, budget: Budget | None) -> _Readable:
    head = stream.read(SNIFF_BYTES)
    source = _Prepend(head, stream)
    if not needs_decoding(head):
        stats.binary = binary_kind(head)
        return source
    why = refusal(head, stats.name)
    if why is not None:
        raise InputError(why)
    return io.BufferedReader(_Decoded(source, Decoder(stats, budget)))


class _Prepend(io.RawIOBase):
    """A stream that first returns already-read bytes, then the rest of ``raw``."""

    def __init__(self, head: bytes, raw: _Readable) -> None:
        self._head = head
        self._raw = raw

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._head:
            if size < 0:
                data, self._head = self._head + self._raw.read(), b""
                return data
            data, self._head = self._head[:size], self._head[size:]
            if len(data) < size:
                data += self._raw.read(size - len(data))
            return data
        return self._raw.read(size)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class Window:
    """At most ``size`` bytes of a stream, from where it stands (a worker's byte range).

    ``first`` (> 0) caps the first read, so that later reads end where the sequential reader's
    do (multiples of the block size from the start of the file) and the blocks come out the same."""

    def __init__(self, raw: _Readable, size: int, first: int | None = None) -> None:
        self._raw = raw
        self._left = size
        self._first = first

    def read(self, size: int = -1, /) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        if self._first is not None:
            want, self._first = min(want, self._first), None
        data = self._raw.read(want) if want > 0 else b""
        self._left -= len(data)
        return data


def merge_stats(into: ReadStats, part: ReadStats) -> None:
    """Add a worker's counts for one byte range to the whole file's."""
    into.bytes_read += part.bytes_read
    into.cut_lines += part.cut_lines
    into.read_error = into.read_error or part.read_error


def iter_blocks(
    stream: _Readable,
    stats: ReadStats,
    block_size: int = BLOCK_SIZE,
    max_line: int = MAX_LINE,
    sniff: bool = True,
    budget: Budget | None = None,
) -> Iterator[bytes]:
    """Yield blocks of whole lines (each ends with ``\\n``); over-long lines are cut to max_line.

    ``sniff=False`` reads the bytes as they are (a range inside a file already known to be plain).
    ``budget`` bounds decompressed output (read/decode.py DEFAULT_BUDGET when None). A format
    that cannot be decoded raises InputError when the first block is asked for.
    """
    source: _Readable = _sniff(stream, stats, budget) if sniff else stream
    carry = b""
    skipping = False  # inside the unread tail of a line that was cut
    while True:
        try:
            chunk = source.read(block_size)
        except OSError as exc:
            stats.read_error = exc.strerror or str(exc)
            chunk = b""
        if not chunk:
            break
        stats.bytes_read += len(chunk)
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk = chunk[nl + 1 :]
            skipping = False
        # The carry never holds a newline: the block ends at the chunk's last one. Joining the
        # carry to the chunk's head (not the whole chunk, then cutting) copies the block once.
        cut = chunk.rfind(b"\n")
        if cut < 0:
            carry += chunk
            if len(carry) > max_line:
                stats.cut_lines += 1
                yield carry[:max_line] + b"\n"
                carry = b""
                skipping = True
            continue
        head = chunk[: cut + 1]  # the chunk itself when it ends with a newline
        block, carry = (carry + head if carry else head), chunk[cut + 1 :]
        if len(carry) > max_line:
            stats.cut_lines += 1
            block += carry[:max_line] + b"\n"
            carry = b""
            skipping = True
        yield block
    if carry:
        yield carry + b"\n"


#: The notice for an input that is no text log; :func:`binary_inputs` finds it again.
BINARY_NOTICE = "{label} is binary ({kind}), not a text log"
_BINARY_TAIL = "), not a text log"


def binary_inputs(notices: Iterable[str]) -> list[str]:
    """The binary-input notices among ``notices`` (the verdict says so first)."""
    return [n for n in notices if n.endswith(_BINARY_TAIL) and " is binary (" in n]


def read_notices(stats: ReadStats) -> list[str]:
    """What the report says about reading one input (empty, cut lines, decoding, budget)."""
    out = []
    name = stats.name
    if stats.bytes_read == 0 and not stats.read_error and stats.budget_stop is None:
        out.append(EMPTY_NOTICE.format(label=name))
    if stats.cut_lines:
        out.append(f"{name}: {stats.cut_lines} line(s) longer than 1 MiB were cut")
    if stats.gzip_truncated:
        out.append(f"{name}: the gzip stream is truncated; what could be read was used")
    elif stats.truncated:
        out.append(
            f"{name}: the {stats.compression} stream is truncated; what could be read was used"
        )
    elif stats.read_error:
        out.append(f"{name}: reading stopped early: {stats.read_error}")
    if stats.compression and stats.compression != "gzip":
        out.append(f"{name}: {stats.compression}-compressed input was decompressed")
    if stats.encoding:
        out.append(f"{name}: {stats.encoding} input was converted to UTF-8")
    if stats.binary:
        out.append(BINARY_NOTICE.format(label=name, kind=stats.binary))
    if stats.budget_stop is not None:
        out.append(
            f"{name}: decompressed input stopped at {stats.budget_stop / 2**30:.2f} GiB, "
            f"{stats.lines:,} lines (budget: {stats.budget_why}); the rest was not read"
        )
    return out
