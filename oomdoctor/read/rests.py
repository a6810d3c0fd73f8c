"""Whether a line behind a `(Name pid=N) ` prefix holds an anchor, with its text tested once.

The workers of a job print the same records, each behind its own process prefix
(`(VllmWorker rank=7 pid=1007) INFO 05-01 10:00:05 [...] Model loading took ...`): 100k
workers make 100k lines that differ in the prefix and in their digits (times, figures). The
anchor alternation costs about 60 ns a byte in Python's engine, so the text after the prefix is
tested once per *shape*: its ASCII digits all made 0, against the anchors that hold no digit
(such an anchor cannot match where a digit is, so the digits cannot change its answer). The
prefix is tested on every line, and so are, on the whole line, the anchors that hold a digit and
those that hold ") " (a match across prefix and text would). The answer is the whole line's.
Where the shapes rarely repeat, the memo stops; it starts only after WARM_UP such lines (a short
log does not pay for compiling the second alternation).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from oomdoctor.read.trie import alternation

#: A process prefix ends within this many bytes; texts up to REST_MAX bytes are remembered,
#: REST_MEMO at a time, once WARM_UP prefixed lines were seen.
PREFIX_MAX = 200
REST_MAX = 1000
REST_MEMO = 4096
WARM_UP = 2000
#: Every ASCII digit → 0.
_ZERO = bytes.maketrans(b"123456789", b"000000000")
_DIGITS = frozenset(b"0123456789")


class RestMemo:
    """One scanner's memo: the shape of the text after a process prefix → whether it holds an
    anchor with no digit."""

    __slots__ = ("_anchors", "_digital", "_misses", "_plain", "_rests", "_seen")

    def __init__(self, anchors: Sequence[bytes]) -> None:
        #: None: not remembering (the shapes did not repeat)
        self._rests: dict[bytes, bool] | None = {}
        self._misses = 0
        self._seen = 0
        self._anchors = tuple(anchors)
        self._plain: re.Pattern[bytes] | None = None
        #: anchors tested on the whole line: they hold a digit, or ") "
        self._digital: re.Pattern[bytes] | None = None

    def _compile(self) -> None:
        plain = [a for a in self._anchors if not any(c in _DIGITS for c in a)]
        whole = [a for a in self._anchors if a not in plain or b") " in a]
        self._plain = re.compile(alternation(plain)) if plain else re.compile(b"(?!)")
        self._digital = re.compile(alternation(whole)) if whole else None

    def anchored(self, line: bytes, search: Callable[[bytes], object]) -> object:
        """Whether ``line`` holds an anchor (truthy), ``search`` being the scanner's test."""
        if line[:1] != b"(" or self._rests is None:
            return search(line)
        cut = line.find(b") ", 1, PREFIX_MAX) + 1
        if cut <= 0 or len(line) - cut > REST_MAX:
            return search(line)
        if self._plain is None:
            self._seen += 1
            if self._seen < WARM_UP:
                return search(line)
            self._compile()
        assert self._plain is not None
        shape = line[cut:].translate(_ZERO)
        found = self._rests.get(shape)
        if found is None:
            self._misses += 1
            if len(self._rests) >= REST_MEMO:
                if self._misses > REST_MEMO * 3 // 4:  # few repeats: not worth it
                    self._rests = None
                    return search(line)
                self._rests.clear()
                self._misses = 0
            found = self._rests[shape] = self._plain.search(shape) is not None
        if found or search(line[:cut]):
            return True
        return self._digital is not None and self._digital.search(line) is not None
