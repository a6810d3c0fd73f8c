"""Find candidate lines in byte blocks with one pass over a combined literal-anchor pattern.

Only lines that contain at least one anchor of a signature or a rule pattern are decoded and
looked at further; everything else costs one regex scan at C speed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator


class Scanner:
    """Yields ``(line_number, line_bytes)`` for every line of a source that holds an anchor."""

    def __init__(self, anchors: Iterable[str]) -> None:
        unique = sorted({a for a in anchors if a}, key=lambda a: (-len(a), a))
        if not unique:
            raise ValueError("a scanner needs at least one anchor")
        self.anchors = tuple(unique)
        self._bytes = re.compile(b"|".join(re.escape(a.encode("utf-8")) for a in unique))
        # A lookahead finds anchors that overlap each other (e.g. "Error" inside a longer one).
        self._text = re.compile("(?=(" + "|".join(re.escape(a) for a in unique) + "))")

    def lines(self, blocks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
        lineno = 0  # newlines counted before `counted` in the current block, across blocks
        search = self._bytes.search
        for block in blocks:
            counted = 0
            pos = 0
            while True:
                m = search(block, pos)
                if m is None:
                    break
                start = block.rfind(b"\n", 0, m.start()) + 1
                end = block.find(b"\n", m.end())
                if end < 0:
                    end = len(block)
                lineno += block.count(b"\n", counted, start)
                counted = start
                yield lineno + 1, block[start:end]
                pos = end + 1
            lineno += block.count(b"\n", counted)

    def matches(self, line: bytes) -> bool:
        """Whether one raw line holds an anchor (the streaming path's prefilter)."""
        return self._bytes.search(line) is not None

    def anchors_in(self, text: str) -> set[str]:
        """Which anchors a (decoded, normalised) text contains."""
        return set(self._text.findall(text))

    def has_anchor(self, text: str) -> bool:
        return self._text.search(text) is not None
