"""A file's lines from its last to its first, in blocks (memory stays one block and a line).

For newest-first exports: the lines are put back in time order without holding the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from oomdoctor.read.decode import BLOCK_SIZE


def count_lines(path: Path, block_size: int = BLOCK_SIZE) -> int:
    """The number of lines of a file (a last line without its newline counts)."""
    n = 0
    last = b"\n"
    with path.open("rb") as fh:
        while chunk := fh.read(block_size):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def lines_backwards(path: Path, block_size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """The file's lines (without their newlines), last first."""
    with path.open("rb") as fh:
        pos = fh.seek(0, 2)
        carry = b""
        first = True
        while pos > 0:
            start = max(0, pos - block_size)
            fh.seek(start)
            chunk = fh.read(pos - start) + carry
            pos = start
            parts = chunk.split(b"\n")
            carry = parts[0]  # the start of a line that began in an earlier block
            if first:
                first = False
                if parts[-1] == b"":
                    parts.pop()  # the newline that ends the file
            yield from reversed(parts[1:])
        if carry or not first:
            yield carry
