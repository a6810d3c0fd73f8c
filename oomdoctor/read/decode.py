"""Decode an input that is not plain text: compressed (gzip, bzip2, xz, zstd where Python has it)
or UTF-16/32 (with or without a byte-order mark), told apart by its first bytes, not its name.

``Decoder`` is push-style (bytes in, pieces of decoded UTF-8 out) so that files, standard input
and ``diagnose --follow`` share it. Every piece is at most BLOCK_SIZE bytes whatever the
compression ratio, and decompressed output has a budget (``Budget``): a bomb stops with a
notice instead of running for minutes.
"""

from __future__ import annotations

import codecs
import zlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

BLOCK_SIZE = 1 << 20
#: Compressed input is handed to the decompressor this many bytes at a time (see _inflate).
FEED = 1 << 14
#: Bytes looked at to tell the format (magic bytes, byte-order marks, NUL patterns).
SNIFF_BYTES = 4096


class InputError(Exception):
    """An input that cannot be read at all (missing, a directory, no permission, a format
    oomdoctor cannot decode)."""


class Stats(Protocol):
    """The fields of read/sources.ReadStats this module fills."""

    name: str
    gzip_truncated: bool
    compression: str | None
    truncated: bool
    encoding: str | None
    budget_stop: int | None
    budget_why: str | None
    read_error: str | None
    binary: str | None


class Budget(NamedTuple):
    """How much decompressed output one input may produce.

    A real server log compresses 10–30:1 (the stats lines repeat); a bomb (GiB of newlines or
    NULs) 200–1000:1. So beyond the first ``grace`` bytes, output may be at most ``ratio`` times
    the compressed bytes read so far (a bomb stops soon after ``grace``); and never more than
    ``max_bytes`` or ``max_lines`` in all (100 million lines of some 150 bytes fill the 16 GiB:
    weeks of a busy server's log)."""

    max_bytes: int = 16 << 30
    max_lines: int = 100_000_000
    ratio: int = 100
    grace: int = 64 << 20

    def exceeded(self, out_bytes: int, lines: int, compressed: int) -> str | None:
        """Which limit the output so far passes, or None."""
        if out_bytes > self.max_bytes:
            return f"at most {self.max_bytes / 2**30:g} GiB decompressed"
        if lines > self.max_lines:
            return f"at most {self.max_lines:,} lines decompressed"
        if out_bytes > self.grace and out_bytes > self.ratio * max(compressed, 1):
            return (
                f"beyond the first {self.grace / 2**20:g} MiB, at most {self.ratio}× the "
                "compressed size"
            )
        return None


DEFAULT_BUDGET = Budget()


class _Unpacker(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


def _zstd() -> Callable[[], Any] | None:
    """Python 3.14's compression.zstd decompressor, or None where Python has none."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return zstd.ZstdDecompressor  # type: ignore[no-any-return,unused-ignore]


def _gunzip() -> Any:
    """zlib with gzip headers (31); concatenated members are started one by one."""
    return zlib.decompressobj(31)


def _bz2() -> Callable[[], Any]:
    import bz2

    return bz2.BZ2Decompressor


def _xz() -> Callable[[], Any]:
    import lzma

    return lzma.LZMADecompressor


class Format(NamedTuple):
    name: str
    magic: tuple[bytes, ...]
    opener: Callable[[], Callable[[], Any] | None] | None  # None: never decoded here
    command: str  # how the user decompresses it: `{cmd} FILE`


#: Compressed formats by magic bytes (gzip is decoded by zlib, the rest by these openers).
FORMATS = (
    Format("gzip", (b"\x1f\x8b",), None, "gunzip -k"),
    Format("bzip2", (b"BZh",), _bz2, "bunzip2 -k"),
    Format("xz", (b"\xfd7zXZ\x00",), _xz, "unxz -k"),
    Format("zstd", (b"\x28\xb5\x2f\xfd",), _zstd, "zstd -d"),
    Format("lz4", (b"\x04\x22\x4d\x18",), lambda: None, "lz4 -d"),
    Format("zip", (b"PK\x03\x04",), lambda: None, "unzip"),
)


def compression_of(head: bytes) -> Format | None:
    """The compressed format whose magic bytes start ``head``."""
    for fmt in FORMATS:
        if head.startswith(fmt.magic):
            if fmt.name == "bzip2" and head[3:4] not in b"123456789":
                continue  # "BZh" then the block size digit
            return fmt
    return None


def refusal(head: bytes, name: str) -> str | None:
    """Why an input that starts with ``head`` cannot be read here (a format Python cannot decode),
    or None."""
    fmt = compression_of(head)
    if fmt is None or fmt.opener is None or fmt.opener() is not None:
        return None
    stdin = name in ("-", "<stdin>")
    tool = fmt.command.split()[0]
    how = f"{tool} -dc FILE | oomdoctor diagnose -" if stdin else f"{fmt.command} {name}"
    shown = "standard input" if stdin else name
    return f"{shown} is {fmt.name}-compressed: decompress it first ({how})"


def text_encoding(head: bytes) -> str | None:
    """The UTF-16/32 codec of a text that starts with ``head`` (a byte-order mark, or the NUL
    pattern of mostly-ASCII text: every other byte, or three bytes of four), or None."""
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        le = head.startswith(codecs.BOM_UTF16_LE)
        body = head[2:]
        zeros = body[1::2] if le else body[0::2]
        # A BOM alone proves little in a byte stream: UTF-16 log text has NULs every other byte.
        return "utf-16" if len(body) < 2 or zeros.count(0) >= 0.3 * len(zeros) else None
    n = len(head) // 4 * 4
    if n < 16:
        return None
    quarter = n // 4
    z = [head[k:n:4].count(0) / quarter for k in range(4)]
    if z[3] >= 0.95 and z[2] >= 0.9 and z[1] >= 0.6 and z[0] <= 0.05:
        return "utf-32-le"
    if z[0] >= 0.95 and z[1] >= 0.9 and z[2] >= 0.6 and z[3] <= 0.05:
        return "utf-32-be"
    if min(z[1], z[3]) >= 0.6 and max(z[0], z[2]) <= 0.05:
        return "utf-16-le"
    if min(z[0], z[2]) >= 0.6 and max(z[1], z[3]) <= 0.05:
        return "utf-16-be"
    return None


#: Magic bytes of files that are programs or images, never logs: what each is called.
_BINARY_MAGIC = (
    (b"\x7fELF", "an ELF executable or library"),
    (b"MZ", "a Windows executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O or Java class file"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
)
#: Bytes no text log holds in any number: C0 controls but NUL (a log cut by copytruncate starts
#: with NULs), TAB, LF, VT, FF, CR and ESC (colour codes), and DEL.
_CONTROL_BYTES = bytes([*range(1, 9), 14, *range(16, 27), *range(28, 32), 127])


def binary_kind(head: bytes) -> str | None:
    """What the input is when its first bytes say it is no text log ("an ELF executable or
    library", "control bytes and invalid UTF-8"), else None: a known magic number, or more than 5% of its bytes
    (NULs aside) controls no log prints, or more than 10% not UTF-8."""
    for magic, name in _BINARY_MAGIC:
        if head.startswith(magic) and (magic != b"MZ" or b"\x00" in head[:64]):
            return name
    body = head.replace(b"\x00", b"")
    if len(body) < 64:
        return None
    controls = len(body) - len(body.translate(None, _CONTROL_BYTES))
    invalid = body.decode("utf-8", "replace").count("\ufffd")
    return (
        "control bytes and invalid UTF-8"
        if controls > 0.05 * len(body) or invalid > 0.1 * len(body)
        else None
    )


def needs_decoding(head: bytes) -> bool:
    """Whether an input that starts with ``head`` is compressed or UTF-16/32 (not plain bytes)."""
    return compression_of(head) is not None or text_encoding(head) is not None


class Decoder:
    """Push bytes of one input in (``feed``), take pieces of UTF-8 out; ``close`` at the end.

    The first ``head`` bytes are held until the format is known. A format Python cannot decode
    raises InputError. What happened (format, truncation, budget) goes into ``stats``.
    """

    def __init__(self, stats: Stats, budget: Budget | None = None, head: int = SNIFF_BYTES) -> None:
        self._stats = stats
        self._budget = budget or DEFAULT_BUDGET
        self._head_size = head
        self._held = b""
        self._sniffed = False
        self._unpack: _Unpacker | None = None
        self._make: Callable[[], Any] | None = None
        self._zlib = False
        self._text: Any = None  # an incremental decoder
        self._text_sniffed = False
        self._text_held = b""
        self._compressed = 0
        self._out = 0
        self._lines = 0
        self.done = False  # the budget ran out, or the data is corrupt: the rest is ignored

    # -- the outside -------------------------------------------------------------------------

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self.done or not data:
            return
        if not self._sniffed:
            self._held += data
            if len(self._held) < self._head_size:
                return
            data, self._held = self._held, b""
            self._sniff(data)
        yield from self._stage(data)

    def close(self) -> Iterator[bytes]:
        if not self._sniffed:
            data, self._held = self._held, b""
            if data:
                self._sniff(data)
                yield from self._stage(data)
        if self._unpack is not None and not self.done and not self._unpack.eof:
            self._stats.truncated = True
            self._stats.gzip_truncated = self._zlib
        yield from self._textual(b"", final=True)

    # -- stages ------------------------------------------------------------------------------

    def _sniff(self, head: bytes) -> None:
        self._sniffed = True
        fmt = compression_of(head)
        if fmt is None:
            return
        make = _gunzip if fmt.opener is None else fmt.opener()
        if make is None:
            raise InputError(refusal(head, self._stats.name) or f"{fmt.name} input")
        self._zlib = fmt.opener is None
        self._stats.compression = fmt.name
        self._make = make
        self._unpack = make()

    def _stage(self, data: bytes) -> Iterator[bytes]:
        if self._unpack is None:
            yield from self._textual(data, final=False)
            return
        self._compressed += len(data)
        for piece in self._inflate(data):
            yield from self._textual(piece, final=False)
            if self.done:
                return

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        """Decompressed pieces of ``data`` (each at most BLOCK_SIZE); concatenated streams
        (gzip members, pbzip2 streams, xz and zstd frames) one after another. The input is fed
        FEED bytes at a time: at each member's end the decompressor copies what it did not read
        into ``unused_data``, so with the whole read at once a million small members would
        cost a million copies of the rest of it."""
        for start in range(0, len(data), FEED):
            yield from self._inflate_piece(data[start : start + FEED])
            if self.done:
                return

    def _inflate_piece(self, data: bytes) -> Iterator[bytes]:
        assert self._unpack is not None and self._make is not None
        while not self.done:
            unpack = self._unpack
            if unpack.eof:
                data = unpack.unused_data + data
                if not data or (data[0] == 0 and not data.strip(b"\x00")):
                    return  # the end (or the zero padding some tools add); more may follow
                self._unpack = unpack = self._make()
            try:
                out = unpack.decompress(data, BLOCK_SIZE)
            except (OSError, EOFError, ValueError, zlib.error) as exc:  # lzma.LZMAError: OSError
                self._stats.read_error = f"corrupt {self._stats.compression} data: {exc}"
                self.done = True
                return
            data = getattr(unpack, "unconsumed_tail", b"")  # zlib hands unread input back
            if out:
                yield self._count(out)
            elif not unpack.eof and not data:
                return  # everything fed is decoded: wait for more input

    def _count(self, piece: bytes) -> bytes:
        self._out += len(piece)
        self._lines += piece.count(b"\n")
        why = self._budget.exceeded(self._out, self._lines, self._compressed)
        if why is not None:
            self._stats.budget_stop = self._out
            self._stats.budget_why = why
            self.done = True
        return piece

    def _textual(self, data: bytes, final: bool) -> Iterator[bytes]:
        """UTF-16/32 to UTF-8 (sniffed on the first decompressed bytes); others pass as they are."""
        if not self._text_sniffed:
            self._text_held += data
            if len(self._text_held) < self._head_size and not final:
                return
            data, self._text_held = self._text_held, b""
            self._text_sniffed = True
            encoding = text_encoding(data)
            if encoding is not None:
                self._stats.encoding = encoding.upper()
                self._text = codecs.getincrementaldecoder(encoding)(errors="replace")
            else:
                self._stats.binary = binary_kind(data)
        if self._text is None:
            if data:
                yield data
            return
        for start in range(0, max(len(data), 1), BLOCK_SIZE // 2):
            chunk = data[start : start + BLOCK_SIZE // 2]
            last = final and start + BLOCK_SIZE // 2 >= len(data)
            text = self._text.decode(chunk, final=last)
            if text:
                yield text.encode("utf-8", "replace")
