"""Lines a dense log repeats, counted instead of stepped over one by one.

A pool that is full writes a retraction line every few lines, and a server under RL writes
`Cache flushed successfully!` as often; between the stats lines these are most of what the
skipping regex would stop at. A sub-block whose lines are all stats, access lines, retraction
lines or such a repeated line is told by C-level counts; then only the retraction lines (found
with `find`) reach the exact line test, and the others are checked to be what they were counted
as. Anything that does not check out sends the sub-block down the exact path, so the result is
the same either way.

Repeated lines are learned while scanning: a line the exact path tested, with no anchor and no
marker of another counted kind, whose text after SGLang's envelope recurs QUIET_AFTER times.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

#: The part of SGLang's retraction line that every version since 0.4.10 prints, and the whole
#: message (0.4.10 to 0.5.23: `#new_tokens_gained` since 0.5.10, `#mamba_num_gained` in 0.5.23).
RETRACT_MARK = b"KV cache pool is full. Retract requests."
RETRACTION_TEXT = (
    rb"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d{1,9}), "
    rb"(?:#new_tokens_gained: \d+, )?(?:#mamba_num_gained: \d+, )?"
    rb"#new_token_ratio: [\d.]+ -> [\d.]+\r?"
)
#: A line's text after its envelope that recurs this often, with no anchor, is learned.
QUIET_AFTER = 16
QUIET_MAX = 4  # learned texts (each costs a count per sub-block)
QUIET_MIN_LEN = 12  # shorter texts are too likely inside other lines
_SEEN_MAX = 4096  # distinct texts remembered while learning
#: SGLang's envelope, strictly: `[2026-03-14 09:30:26 DP0 TP0] ` (no lowercase: no marker fits).
ENVELOPE = re.compile(
    rb"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Z_]{1,12}\d{1,5})*\] "
)
#: A retraction line in that envelope holds no other counted marker.
_RETRACTION_LINE = re.compile(ENVELOPE.pattern + RETRACTION_TEXT)


class Frequent:
    """The learned repeated texts of one scanner, and the checks of a counted sub-block."""

    def __init__(self, boring: Sequence[bytes]) -> None:
        self.boring = tuple(boring)  # markers of the kinds counted as boring (stats, access)
        self.quiet: list[bytes] = []
        self._seen: dict[bytes, int] = {}

    def learn(self, line: bytes) -> None:
        """A line the exact path tested and found no anchor in."""
        if len(self.quiet) >= QUIET_MAX:
            return
        m = ENVELOPE.match(line)
        text = line[m.end() :] if m else b""
        if len(text) < QUIET_MIN_LEN:
            return
        seen = self._seen.get(text, 0) + 1
        if seen < QUIET_AFTER:
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen[text] = seen
            return
        del self._seen[text]
        if not any(k in text for k in (*self.boring, RETRACT_MARK, *self.quiet)) and not any(
            text in q for q in self.quiet
        ):
            self.quiet.append(text)

    def kinds(self, retractions: bool) -> list[bytes]:
        return [RETRACT_MARK, *self.quiet] if retractions else list(self.quiet)

    def lines_of(
        self,
        block: bytes,
        start: int,
        end: int,
        kinds: Sequence[bytes],
        left: int,
        search: Callable[[bytes], object],
    ) -> list[tuple[int, int, int]] | None:
        """The retraction lines between start and end, in order, when every line there that is
        not stats or access (``left`` of them) is a retraction or a learned line; else None.
        Each is (line start, line end, #retracted_reqs) where it is SGLang's line in SGLang's
        envelope, #retracted_reqs -1 for another line holding the marker (to be tested as any
        other line)."""
        total = 0
        counts = []
        for kind in kinds:
            counts.append(block.count(kind, start, end))
            total += counts[-1]
            if total > left:
                return None
        if total != left:
            return None
        retractions: list[tuple[int, int, int]] = []
        for kind, count in zip(kinds, counts, strict=True):
            if not count:
                continue
            if kind is RETRACT_MARK:
                found = self._retractions(block, start, end, retractions)
            else:
                found = self._learned(block, start, end, kind, search)
            if found != count:  # a line that is not what it was counted as, or two in one line
                return None
        return retractions

    def _retractions(
        self, block: bytes, start: int, end: int, out: list[tuple[int, int, int]]
    ) -> int:
        """Add the retraction lines to ``out``; how many lines hold the marker (-1: a line that
        holds another counted marker too)."""
        find, full = block.find, _RETRACTION_LINE.fullmatch
        found = 0
        at = find(RETRACT_MARK, start, end)
        while at >= 0:
            first = block.rfind(b"\n", start, at) + 1 or start
            last = find(b"\n", at, end)
            last = end if last < 0 else last
            m = full(block, first, last)
            if m is not None:
                out.append((first, last, int(m[1])))
            elif self._only(block[first:last], RETRACT_MARK):
                out.append((first, last, -1))
            else:
                return -1
            found += 1
            at = find(RETRACT_MARK, last, end)
        return found

    def _learned(
        self, block: bytes, start: int, end: int, text: bytes, search: Callable[[bytes], object]
    ) -> int:
        """How many lines hold the learned text (-1: one that is not the text in SGLang's
        envelope, or has an anchor in that envelope)."""
        found = 0
        for _, line in _lines_with(block, start, end, text):
            m = ENVELOPE.match(line)
            if m is None or line[m.end() :] != text or search(line[: m.end()]):
                return -1
            found += 1
        return found

    def _only(self, line: bytes, kind: bytes) -> bool:
        """The line holds this counted marker once and no other (it was counted once)."""
        return line.count(kind) == 1 and not any(
            k in line for k in (*self.boring, RETRACT_MARK, *self.quiet) if k is not kind
        )


def _lines_with(block: bytes, start: int, end: int, kind: bytes) -> Iterator[tuple[int, bytes]]:
    """Each line between start and end that holds ``kind`` (once per line), with its start."""
    at = block.find(kind, start, end)
    while at >= 0:
        first = block.rfind(b"\n", start, at) + 1 or start
        last = block.find(b"\n", at, end)
        last = end if last < 0 else last
        yield first, block[first:last]
        at = block.find(kind, last, end)
