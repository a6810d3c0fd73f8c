"""Whether a line behind a `(Name pid=N) ` prefix holds an anchor, with its text tested once.

The workers of a job print the same records, each behind its own process prefix
(`(VllmWorker rank=7 pid=1007) INFO ... Model loading took ...`): 100k workers make 100k lines
that differ only there. The anchor alternation costs about 60 ns a byte in Python's engine, so
the text after the prefix is tested once and remembered; the prefix is tested on every line,
and the anchors that hold ") " (a match across prefix and text would hold it) in the whole line.
The answer is the same as testing the whole line. Where the texts rarely repeat (each carries
its own time), the memo stops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: A process prefix ends within this many bytes; texts up to REST_MAX bytes are remembered,
#: REST_MEMO at a time.
PREFIX_MAX = 200
REST_MAX = 1000
REST_MEMO = 4096


class RestMemo:
    """One scanner's memo: the text after a process prefix → whether it holds an anchor."""

    __slots__ = ("_across", "_misses", "_rests")

    def __init__(self, anchors: Sequence[bytes]) -> None:
        #: None: not remembering (the texts did not repeat)
        self._rests: dict[bytes, bool] | None = {}
        self._misses = 0
        self._across = tuple(a for a in anchors if b") " in a)

    def anchored(self, line: bytes, search: Callable[[bytes], object]) -> object:
        """Whether ``line`` holds an anchor (truthy), ``search`` being the scanner's test."""
        if line[:1] != b"(" or self._rests is None:
            return search(line)
        cut = line.find(b") ", 1, PREFIX_MAX) + 1
        if cut <= 0 or len(line) - cut > REST_MAX:
            return search(line)
        rest = line[cut:]
        found = self._rests.get(rest)
        if found is None:
            self._misses += 1
            if len(self._rests) >= REST_MEMO:
                if self._misses > REST_MEMO * 3 // 4:  # few repeats: not worth it
                    self._rests = None
                    return search(line)
                self._rests.clear()
                self._misses = 0
            found = self._rests[rest] = bool(search(rest))
        return found or search(line[:cut]) or any(a in line for a in self._across)
