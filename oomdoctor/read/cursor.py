"""Where the scanner is in a block: the last line start whose index is known, the run of
retraction lines held back, and the stats heads searched so far (scan.py)."""

from __future__ import annotations

from typing import NamedTuple


class Counted(NamedTuple):
    """Retraction lines of one run that were counted instead of passed."""

    after: int  # line index in the block of the run's last line (passed): they come before it
    lines: int
    requests: int  # their #retracted_reqs, summed


class Cursor:
    """A line start whose index is known (the last candidate's, or the sub-block's start): the
    next candidate's index is counted from there, not from the block's start."""

    __slots__ = ("counted", "heads", "index", "offset", "run", "stats")

    def __init__(self) -> None:
        self.offset = 0
        self.index = 0
        #: the run of retraction lines held back: (index, line start, line end, #retracted_reqs,
        #: offset and index of a known line start before it). Past the first RETRACTIONS_KEPT
        #: the index is -1 until needed: only the run's last one is passed.
        self.run: list[tuple[int, int, int, int, int, int]] = []
        self.counted: list[Counted] = []
        #: stats head → (searched up to, found at or -1): only new bytes are searched (last_head)
        self.heads: dict[bytes, tuple[int, int]] = {}
        #: stats heads in the block up to the end of the current sub-block
        self.stats = 0

    def last_head(self, block: bytes, head: bytes, start: int) -> tuple[int, bool]:
        """Where ``head`` last occurs before ``start``, and whether that is news (its line not
        yet a candidate); out of order, the whole block is searched."""
        searched, found = self.heads.get(head, (0, -1))
        if start < searched:
            return block.rfind(head, 0, start), True
        at = block.rfind(head, max(searched - len(head) + 1, 0), start)
        self.heads[head] = (start, at if at >= 0 else found)
        return (at, at != found) if at >= 0 else (found, False)

    def index_of(self, block: bytes, start: int) -> int:
        """The index of the line starting at ``start`` (at or after the known one)."""
        self.index += block.count(b"\n", self.offset, start)
        self.offset = start
        return self.index

    def known(self, offset: int, index: int) -> None:
        """A later line start whose index is known (a sub-block's start)."""
        if offset > self.offset:
            self.offset, self.index = offset, index
