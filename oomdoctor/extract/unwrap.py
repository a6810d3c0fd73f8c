"""Between the reader and the scanner: the input's wrapper taken off, block by block.

The first block's head is looked at (plan.py). A plain log's blocks pass as they are, and so do
those of a log whose only wrapper is a prefix (the extractor strips it from each candidate line).
Otherwise each physical line is read in time order (a newest-first file backwards, block by
block; a pipe buffered up to a bound), unpacked from its JSON record, its CRI partial lines and
wrapped pieces joined, and the logical lines go on in blocks, each with the physical line number
of every logical line in it (a joined record: its first line; a reversed file: the line in the
file), so that evidence cites the line as the user has it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from oomdoctor.extract import jsonlines
from oomdoctor.extract.joiner import Joiner
from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.extract.normalise import clean
from oomdoctor.extract.plan import SAMPLE_BYTES, Plan, body_regex, detect
from oomdoctor.read.decode import BLOCK_SIZE

#: A pipe's newest-first lines are held up to this many bytes to be put back in order.
REVERSE_BOUND = 256 << 20
_CRI_LINE = LazyPattern(rb"^(\S+) (stdout|stderr) ([PF]) ?")


class Block(NamedTuple):
    """Whole logical lines, and the physical line number of each (None: they are the physical
    lines, numbered by the caller's count)."""

    data: bytes
    numbers: Sequence[int] | None = None


class Unwrapper:
    """Iterate to get the blocks; ``plan``, ``physical`` (lines read) and ``notices`` are set
    as it goes."""

    def __init__(
        self,
        blocks: Iterable[bytes],
        anchors: Sequence[str],
        path: Path | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._blocks = iter(blocks)
        self._anchors = anchors
        self._path = path  # a plain regular file, which can be read backwards
        self._on_bytes = on_bytes
        self.plan = Plan()
        self.physical = 0
        self.notices: list[str] = []

    def __iter__(self) -> Iterator[Block]:
        held: list[bytes] = []  # a pipe hands over what it has: gather the head to look at
        while sum(len(b) for b in held) < SAMPLE_BYTES:
            block = next(self._blocks, None)
            if block is None:
                break
            held.append(block)
        if not held:
            return
        first = b"".join(held) if len(held) > 1 else held[0]
        self.plan = plan = detect(_sample(first), self._anchors)
        if not plan.rewrites:
            yield Block(first)
            for block in self._blocks:
                yield Block(block)
            return
        yield from self._rewrite(self._physical(first))

    # -- physical lines, in time order -------------------------------------------------------

    def _physical(self, first: bytes) -> Iterator[tuple[int, bytes]]:
        if not self.plan.reverse:
            n = 0
            for block in _chain(first, self._blocks):
                lines = block.split(b"\n")
                lines.pop()  # blocks end with a newline
                for line in lines:
                    n += 1
                    yield n, line
            return
        if self._path is not None:
            from oomdoctor.read.backwards import count_lines, lines_backwards

            total = count_lines(self._path)
            for k, line in enumerate(lines_backwards(self._path)):
                if self._on_bytes is not None:
                    self._on_bytes(len(line) + 1)
                yield total - k, line
            return
        yield from self._reversed_pipe(first)

    def _reversed_pipe(self, first: bytes) -> Iterator[tuple[int, bytes]]:
        held: list[bytes] = []
        size = 0
        blocks = _chain(first, self._blocks)
        for block in blocks:
            held.append(block)
            size += len(block)
            if size > REVERSE_BOUND:
                self.notices.append(
                    f"the input is newest first, but longer than {REVERSE_BOUND >> 20} MiB on a "
                    "pipe: its order could not be restored (pass the file itself)"
                )
                n = 0
                for b in _chain(b"", held, blocks):
                    for line in b.split(b"\n")[:-1]:
                        n += 1
                        yield n, line
                return
        lines = [ln for b in held for ln in b.split(b"\n")[:-1]]
        held = []
        total = len(lines)
        for k in range(total - 1, -1, -1):
            yield k + 1, lines[k]

    # -- logical lines -----------------------------------------------------------------------

    def _rewrite(self, physical: Iterator[tuple[int, bytes]]) -> Iterator[Block]:
        plan = self.plan
        out: list[bytes] = []
        numbers: list[int] = []
        size = 0

        def emit(number: int, text: str) -> None:
            nonlocal size
            data = text.encode("utf-8", "surrogateescape")
            out.append(data)
            numbers.append(number)
            size += len(data) + 1

        joiners: list[Joiner] = []

        def shown(number: int, text: str) -> None:
            emit(number, clean(text))

        push: Callable[[int, str], None] = shown
        for wrap in reversed(plan.wraps):  # the innermost wrap is undone last
            pieces = re.compile(wrap.pieces) if wrap.pieces is not None else body_regex(None)
            whole = plan.prefix
            record = whole.compiled() if whole is not None and whole.regex != wrap.pieces else None
            joiners.append(Joiner(wrap, pieces, push, record))
            push = joiners[-1].push
        cri: dict[bytes, tuple[int, bytes]] = {}
        for number, raw in physical:
            self.physical = max(self.physical, number)
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            if plan.cri:
                m = _CRI_LINE.match(raw)
                if m is not None:
                    start, held = cri.pop(m.group(2), (number, m.group(1) + b" "))
                    held += raw[m.end() :]
                    if m.group(3) == b"P" and len(held) < BLOCK_SIZE:
                        cri[m.group(2)] = (start, held)
                        continue
                    number, raw = start, held
            text = raw.decode("utf-8", "surrogateescape")
            unpacked = jsonlines.unpack(text, plan.json) if plan.json is not None else None
            for piece in unpacked if unpacked is not None else (text,):
                push(number, piece)
            if size >= BLOCK_SIZE:
                yield Block(b"\n".join(out) + b"\n", numbers)
                out, numbers, size = [], [], 0
        for start, held in sorted(cri.values()):
            push(start, held.decode("utf-8", "surrogateescape"))
        for joiner in reversed(joiners):  # the outermost first: what it holds goes on inward
            joiner.close()
        if out:
            yield Block(b"\n".join(out) + b"\n", numbers)


def plan_of_file(path: Path, anchors: Sequence[str]) -> Plan:
    """The plan of a plain file, from its head (whole lines of its first block)."""
    with path.open("rb") as fh:
        head = fh.read(SAMPLE_BYTES)
    cut = head.rfind(b"\n") + 1
    return detect(_sample(head[:cut] if cut else head), anchors)


def _chain(first: bytes, *rest: Iterable[bytes]) -> Iterator[bytes]:
    yield first
    for more in rest:
        yield from more


def _sample(block: bytes) -> list[str]:
    head = block[:SAMPLE_BYTES]
    cut = head.rfind(b"\n") if len(block) > SAMPLE_BYTES else len(head)
    lines = head[: max(cut, 0)].split(b"\n")
    return [ln.decode("utf-8", "replace") for ln in lines]
