"""Read inputs as a stream of byte blocks that end on line boundaries.

Files, ``-`` (stdin) and gzip (detected by its magic bytes, not its name) are supported; UTF-16
input (a byte-order mark) is transcoded to UTF-8. Memory stays bounded: blocks have a fixed size and
a line longer than ``max_line`` is cut, with the cut counted, never buffered whole.
"""

from __future__ import annotations

import codecs
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


BLOCK_SIZE = 1 << 20
MAX_LINE = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


class InputError(Exception):
    """An input that cannot be read at all (missing, a directory, no permission)."""


@dataclass
class ReadStats:
    """What reading one source ran into; turned into notices by the caller."""

    name: str
    bytes_read: int = 0
    lines: int = 0
    cut_lines: int = 0
    gzip: bool = False
    gzip_truncated: bool = False
    utf16: bool = False
    read_error: str | None = None


def open_source(name: str, stdin: BinaryIO | None = None) -> BinaryIO:
    """Open ``name`` (``-`` is stdin) for binary reading, or raise InputError with the reason."""
    if name == "-":
        if stdin is None:
            raise InputError("no standard input to read")
        return stdin
    path = Path(name)
    try:
        if path.is_dir():
            raise InputError(f"{name}: is a directory")
        return path.open("rb")
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except PermissionError:
        raise InputError(f"{name}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{name}: {exc.strerror or exc}") from None


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


class _Utf16ToUtf8(_Transform):
    """Transcodes a UTF-16 byte stream (with BOM) to UTF-8, incrementally."""

    def __init__(self, raw: _Readable) -> None:
        super().__init__(raw)
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")

    def _produce(self) -> bytes:
        chunk = self._raw.read(BLOCK_SIZE // 2)
        self._done = not chunk
        return self._decoder.decode(chunk, final=not chunk).encode("utf-8", "replace")


class _Gunzip(_Transform):
    """Incremental gzip decoding that keeps every byte decoded before a truncation or error.

    (``gzip.GzipFile.read`` discards the partial output of the call that hits a cut stream.)
    Concatenated gzip members are decoded one after another. Each call inflates at most
    BLOCK_SIZE bytes (a 1 MiB compressed chunk of a log can hold 10–20 MiB of text).
    """

    def __init__(self, raw: _Readable, stats: ReadStats) -> None:
        super().__init__(raw)
        self._stats = stats
        self._z = zlib.decompressobj(31)
        self._input = b""  # compressed bytes not yet fed to zlib

    def _produce(self) -> bytes:
        if not self._input:
            self._input = self._raw.read(BLOCK_SIZE)
            if not self._input:
                self._stats.gzip_truncated = not self._z.eof
                self._done = True
                return b""
        try:
            out = self._z.decompress(self._input, BLOCK_SIZE)
        except zlib.error as exc:
            self._stats.read_error = f"corrupt gzip data: {exc}"
            self._done = True
            return b""
        self._input = self._z.unconsumed_tail
        if self._z.eof:
            rest = self._z.unused_data + self._input
            self._input = rest
            if rest:  # the next member
                self._z = zlib.decompressobj(31)
        return out


def _sniff(stream: _Readable, stats: ReadStats) -> _Readable:
    head = stream.read(4096)
    if head.startswith(_GZIP_MAGIC):
        stats.gzip = True
        return io.BufferedReader(_Gunzip(_Prepend(head, stream), stats))
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and _looks_utf16(head):
        stats.utf16 = True
        return io.BufferedReader(_Utf16ToUtf8(_Prepend(head, stream)))
    return _Prepend(head, stream)


def _looks_utf16(head: bytes) -> bool:
    """A BOM alone proves little in a byte stream; UTF-16 log text has NULs every other byte."""
    body = head[2:]
    if len(body) < 2:
        return True
    le = head[:2] == codecs.BOM_UTF16_LE
    zeros = body[1::2] if le else body[0::2]
    return zeros.count(0) >= 0.3 * len(zeros)


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
    into.lines += part.lines
    into.cut_lines += part.cut_lines
    into.read_error = into.read_error or part.read_error


def iter_blocks(
    stream: _Readable,
    stats: ReadStats,
    block_size: int = BLOCK_SIZE,
    max_line: int = MAX_LINE,
    sniff: bool = True,
) -> Iterator[bytes]:
    """Yield blocks of whole lines (each ends with ``\\n``); over-long lines are cut to max_line.

    ``sniff=False`` reads the bytes as they are (a range inside a file already known to be plain).
    """
    source: _Readable = _sniff(stream, stats) if sniff else stream
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
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > max_line:
                stats.cut_lines += 1
                stats.lines += 1
                yield data[:max_line] + b"\n"
                carry = b""
                skipping = True
            else:
                carry = data
            continue
        block, carry = data[: cut + 1], data[cut + 1 :]
        if len(carry) > max_line:
            stats.cut_lines += 1
            block += carry[:max_line] + b"\n"
            carry = b""
            skipping = True
        stats.lines += block.count(b"\n")
        yield block
    if carry:
        stats.lines += 1
        yield carry + b"\n"
