"""Joins the records a wrap broke over several lines, as the lines stream past, by the wrap
that wrapping.py learned from the log (its width, kind and indent)."""

from __future__ import annotations

import re
from collections.abc import Callable

from oomdoctor.extract.normalise import clean
from oomdoctor.extract.wrapping import (
    CARETS,
    MAX_RECORD,
    Wrap,
    bare_envelope,
    complete_frame,
    first_word,
    indent_of,
    soft_cut,
    starts_record,
)


class Joiner:
    """Joins the pieces of wrapped records as lines stream past (``push``, then ``close``);
    each finished record comes out with the number of its first physical line."""

    def __init__(
        self,
        wrap: Wrap,
        prefix: re.Pattern[str] | None,
        emit: Callable[[int, str], None],
        record: re.Pattern[str] | None = None,
    ) -> None:
        """``prefix``: what every physical line carries (the wrap's pieces too); ``record``:
        the longer prefix that only the lines starting records carry, if any (a line that has
        it starts a record)."""
        self.wrap = wrap
        self._prefix = prefix
        self._record = record
        self._emit = emit
        self._number = 0
        self._text: str | None = None  # the record so far
        self._last = 0  # the measured length of its last physical piece
        self._spaced = False  # whether that piece could have been broken at a space
        self._pieces = 0

    def _body(self, text: str) -> str:
        for regex in (self._record, self._prefix):
            m = regex.match(text) if regex is not None else None
            if m is not None:
                return text[m.end() :]
        return text

    def push(self, number: int, line: str) -> None:
        """The next physical line (as read: colour codes are removed here)."""
        text = clean(line)
        hidden = 0 if self.wrap.shown else len(line) - len(text)
        if not self.wrap.soft:
            text = text.rstrip()
        body = self._body(text)
        if self._text is not None and self._bare_prefix(text, body) and self.wrap.indent:
            self._text += " " + body.lstrip(" ")  # what a wrap cut off a prefix that stood alone
            self._pieces += 1
            self._measure(text, body, hidden, carried=True)
            return
        starts = self._record is not None and self._record.match(text) is not None
        if self._text is not None and not starts and self._continues(body):
            piece = body  # a piece that carries the prefix again leaves it out
            joined = piece if self.wrap.soft else " " + piece.lstrip(" ")
            self._text += joined
            self._pieces += 1
            self._measure(text, body, hidden, carried=True)
            return
        self.close()
        self._number, self._text, self._pieces = number, text, 1
        self._measure(text, body, hidden, carried=False)

    def _measure(self, text: str, body: str, hidden: int, carried: bool) -> None:
        """The last piece's length as the wrapper counted it (without the indent it added;
        with the colour codes, where it counted them), and whether its body had a space to
        break at."""
        carried_indent = self.wrap.indent if carried and not self.wrap.soft else 0
        self._last = len(body if self.wrap.body else text) + hidden - carried_indent
        self._spaced = " " in body.strip()

    def _bare_prefix(self, text: str, body: str) -> bool:
        """A record that is its prefix alone, and an indented line without the prefix after
        it: a hard wrap broke the line at the space after the prefix."""
        assert self._text is not None
        if self.wrap.soft or self._pieces != 1 or body is not text or not body.strip():
            return False
        if indent_of(body) != self.wrap.indent:
            return False
        rest = self._body(self._text)
        return rest is not self._text and not rest.strip()

    def _continues(self, body: str) -> bool:
        assert self._text is not None
        wrap = self.wrap
        if len(self._text) > MAX_RECORD:
            return False
        if wrap.soft:
            return self._last == wrap.width and soft_cut(self._body(self._text), body)
        if indent_of(body) != wrap.indent:
            return False
        if bare_envelope(self._body(self._text)):
            return True
        if starts_record(body, False, wrap.indent) or complete_frame(self._body(self._text)):
            return False
        if self._last > wrap.width and not self._spaced:
            return True  # a word longer than the width stood on its own
        if self._last > wrap.width + wrap.indent:
            return False
        if self._last > wrap.width:
            return True  # the width was read low (the log's own indent taken for a carried one)
        if CARETS.match(self._text):
            return False  # a marker line is never cut: nothing follows the carets
        return self._last + 1 + first_word(body) > wrap.width

    def close(self) -> None:
        if self._text is not None:
            self._emit(self._number, self._text)
        self._text = None
