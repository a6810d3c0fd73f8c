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
from typing import BinaryIO

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


class _Utf16ToUtf8(io.RawIOBase):
    """Transcodes a UTF-16 byte stream (with BOM) to UTF-8, incrementally."""

    def __init__(self, raw: BinaryIO, head: bytes) -> None:
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._pending = self._decoder.decode(head).encode("utf-8", "replace")
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending and not self._eof:
            chunk = self._raw.read(BLOCK_SIZE)
            if not chunk:
                self._eof = True
                self._pending = self._decoder.decode(b"", final=True).encode("utf-8", "replace")
            else:
                self._pending = self._decoder.decode(chunk).encode("utf-8", "replace")
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _sniff(stream: BinaryIO, stats: ReadStats) -> BinaryIO:
    head = stream.read(4)
    if head.startswith(_GZIP_MAGIC):
        stats.gzip = True
        return io.BufferedReader(_Gunzip(_Prepend(head, stream), stats))
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        stats.utf16 = True
        return io.BufferedReader(_Utf16ToUtf8(stream, head))
    return _Prepend(head, stream)  # type: ignore[return-value]


class _Gunzip(io.RawIOBase):
    """Incremental gzip decoding that keeps every byte decoded before a truncation or error.

    (``gzip.GzipFile.read`` discards the partial output of the call that hits a cut stream.)
    Concatenated gzip members are decoded one after another.
    """

    def __init__(self, raw: io.RawIOBase, stats: ReadStats) -> None:
        self._raw = raw
        self._stats = stats
        self._z = zlib.decompressobj(31)
        self._pending = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending and not self._done:
            chunk = self._raw.read(BLOCK_SIZE)
            if not chunk:
                self._done = True
                if not self._z.eof:
                    self._stats.gzip_truncated = True
                break
            try:
                out = self._z.decompress(chunk)
                while self._z.eof and self._z.unused_data:  # next member
                    rest = self._z.unused_data
                    self._z = zlib.decompressobj(31)
                    out += self._z.decompress(rest)
            except zlib.error as exc:
                self._stats.read_error = f"corrupt gzip data: {exc}"
                self._done = True
                break
            self._pending = out
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class _Prepend(io.RawIOBase):
    """A stream that first returns already-read bytes, then the rest of ``raw``."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
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


def iter_blocks(
    stream: BinaryIO,
    stats: ReadStats,
    block_size: int = BLOCK_SIZE,
    max_line: int = MAX_LINE,
) -> Iterator[bytes]:
    """Yield blocks of whole lines (each ends with ``\\n``); over-long lines are cut to max_line."""
    source = _sniff(stream, stats)
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
