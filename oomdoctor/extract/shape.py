"""The prefix most lines of a log share, learned from the lines as a template of token classes.

A wrapper puts the same kind of thing before every line: a timestamp of some format, a host or
pod name, a PID, a service name and ``|``, a line number, a ``> `` quote, Loki's
``time<TAB>{labels}<TAB>``. Each line's head is cut into units (digits, words, runs of spaces,
tabs, single other characters); the units most lines share, from the start, are the template,
cut after a separator (a space or a tab). Digits become ``\\d+`` and words that vary
``[A-Za-z_]+`` (a word every line has, a host or a service, stays literal), punctuation stays
literal, so the template fits every line of the log, not only the sample it was learned from.
No list of formats is involved; the known logger envelopes only say where a learned prefix must
stop (they are parsed, not stripped blind: normalise.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from oomdoctor.extract.lazy import LazyPattern

#: How much of a line's head is looked at.
HEAD_CHARS = 160
#: At most this many units in a template (Loki's labels are the longest prefixes met); the
#: first FIRST_UNITS are read first, the rest only when a template reaches that far.
MAX_UNITS = 48
FIRST_UNITS = 24
#: Fewer sample lines than this teach nothing (a shape needs repetition to be told from text).
MIN_LINES = 3
#: A unit: a line number (spaces then digits, at the start only), digits, a word, a run of
#: spaces, a tab, or any other single character.
_UNIT = LazyPattern(r"\d+|[A-Za-z_]+| +|\t|.", re.S)
_LEADING_NUMBER = LazyPattern(r" *\d+")
_DIGIT = LazyPattern(r"\d")
#: A template is learned from at most about this many lines (spread over the sample).
LEARNED_FROM = 64
#: Whether most lines start with a known envelope is told from at most this many of them.
TESTED = 48
_SEPARATORS = frozenset(" \t")
#: The share of lines one value of a word of the template must take (else it is message text).
STEADY = 0.6
#: A template must hold one of these (or a digit): words and spaces alone are a message's words.
_STRUCTURE = frozenset("|>]):}\t=/[(-")


class Unit(NamedTuple):
    kind: str  # "9" digits, "a" a word, " " spaces, "\t", or the character itself
    text: str
    end: int  # offset in the line just after the unit


class Template(NamedTuple):
    """A learned prefix: its regex (anchored at the line start), its shape, and how many of the
    sample's lines it fitted."""

    regex: str
    shape: str
    share: float

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.regex)


def _compile(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def units(line: str, limit: int = MAX_UNITS) -> list[Unit]:
    """The first ``limit`` units of a line's head (a leading line number with its padding is one
    digit unit)."""
    head = line[:HEAD_CHARS]
    out: list[Unit] = []
    pos = 0
    if head[:1] == " ":
        m = _LEADING_NUMBER.match(head)
        if m is not None and m.end() > 0 and head[m.end() - 1].isdigit():
            out.append(Unit("9", m.group(), m.end()))
            pos = m.end()
    for text in _UNIT.findall(head, pos)[: limit - len(out)]:
        pos += len(text)
        c = text[0]
        if c.isdigit():
            kind = "9"
        elif c == " ":
            kind = " "
        elif (c.isalpha() or c == "_") and c.isascii():
            kind = "a"
        else:
            kind = c
        out.append(Unit(kind, text, pos))
    return out


class _Cut(NamedTuple):
    depth: int  # units in the template
    lines: tuple[int, ...]  # the sample lines it fits


def _descend(shapes: Sequence[list[Unit]], need: int) -> tuple[list[str], list[_Cut]]:
    """Follow the most common unit, position by position, while at least ``need`` lines share
    every unit so far; each separator reached is a possible end of the template. A word that
    varies from line to line is a message's first word, not a wrapper's: the walk stops there."""
    alive = [i for i, s in enumerate(shapes) if s]
    kinds: list[str] = []
    cuts: list[_Cut] = []
    for depth in range(MAX_UNITS):
        counts = Counter(shapes[i][depth].kind for i in alive if len(shapes[i]) > depth)
        if not counts:
            break
        kind, n = counts.most_common(1)[0]
        # a line that ends here fits a template that ends with a separator (`> ` on an empty
        # quoted line is `>`)
        ended = [i for i in alive if len(shapes[i]) == depth] if kind in _SEPARATORS else []
        if n + len(ended) < need:
            break
        alive = [i for i in alive if len(shapes[i]) > depth and shapes[i][depth].kind == kind]
        alive += ended
        if kind == "a" and not _steady(shapes[i][depth].text for i in alive):
            break
        # a run of spaces right after a separator is the message's indentation, not the prefix's
        if kind in _SEPARATORS and not (kinds and kinds[-1] in _SEPARATORS):
            cuts.append(_Cut(depth + 1, tuple(alive)))
        kinds.append(kind)
    return kinds, cuts


def _steady(words: Iterable[str]) -> bool:
    """A wrapper's words repeat (a host, `stdout`, a month, a level): one value on most lines,
    or very few values; a message's first words do not."""
    counts = Counter(words)
    total = sum(counts.values())
    return (len(counts) <= 2 and total >= 8) or counts.most_common(1)[0][1] >= STEADY * total


def _regex(kinds: Sequence[str], texts: Sequence[Sequence[str]]) -> str:
    """The template's regex: classes for digits and for words that vary, literal punctuation and
    words that do not; inner runs of spaces of any width; the final separator one space (or the
    line's end: an empty quoted line is ``>`` alone)."""
    out = []
    last = len(kinds) - 1
    for i, kind in enumerate(kinds):
        if kind == "9":
            padded = i == 0 and any(t[i].startswith(" ") for t in texts)
            out.append(r" *\d+" if padded else r"\d+")
        elif kind == "a":
            # one word on every line (a host, a service, `INFO`) stays that word: as a class it
            # would also take a message's first word (`RuntimeError: `)
            words = {t[i] for t in texts if len(t) > i}
            out.append(re.escape(words.pop()) if len(words) == 1 else r"[A-Za-z_]+")
        elif kind == " ":
            out.append(r"(?: |$)" if i == last else r" +")
        elif kind == "\t":
            out.append(r"\t")
        else:
            out.append(re.escape(kind))
    return "^" + "".join(out)


def learn(
    lines: Sequence[str],
    share: float,
    stop_at: Callable[[str], bool] | None = None,
    forbidden: Callable[[str], bool] | None = None,
    min_chars: int = 1,
) -> Template | None:
    """The template ``share`` of the (non-blank) sample lines begin with, or None.

    ``stop_at(rest)``: a known envelope starts at ``rest`` (the template ends before it, on the
    lines where most do). ``forbidden(prefix)``: the prefix text holds message words (an anchor
    of a signature): such a cut is not a prefix. ``min_chars``: the shortest template kept.
    """
    body = [ln for ln in lines if ln.strip()]
    if len(body) < MIN_LINES:
        return None
    body = body[:: max(1, len(body) // LEARNED_FROM)]
    if stop_at is not None and _most(body, stop_at):
        return None  # the lines start with a known envelope: nothing to learn
    need = max(MIN_LINES, -(-int(share * 1000) * len(body) // 1000))
    shapes = [units(ln, FIRST_UNITS) for ln in body]
    kinds, cuts = _descend(shapes, need)
    if len(kinds) >= FIRST_UNITS - 1:  # a long prefix (Loki's labels): look further
        shapes = [units(ln) for ln in body]
        kinds, cuts = _descend(shapes, need)
    best: _Cut | None = None
    for cut in cuts:
        offsets = [_offset(shapes[i], cut.depth) for i in cut.lines]
        heads = [body[i][:o] for i, o in zip(cut.lines, offsets, strict=True)]
        if forbidden is not None and any(forbidden(h) for h in {_DIGIT.sub("0", h) for h in heads}):
            break  # message text: this cut and every longer one
        if not _structured(kinds[: cut.depth]):
            continue
        if min(len(h) for h in heads) < min_chars:
            continue
        best = cut
        if stop_at is not None and _most(
            [body[i][o:] for i, o in zip(cut.lines, offsets, strict=True)], stop_at
        ):
            break  # a known envelope follows: it is parsed, not stripped
    if best is None:
        return None
    used = kinds[: best.depth]
    texts = [[u.text for u in shapes[i][: best.depth]] for i in best.lines]
    return Template(_regex(used, texts), "".join(used), len(best.lines) / len(body))


def _offset(shape: Sequence[Unit], depth: int) -> int:
    """Where the message starts after a template of ``depth`` units: one separator character
    past the unit before it (the rest of a run of spaces is the message's indentation)."""
    return (shape[depth - 2].end if depth >= 2 else 0) + 1


def _structured(kinds: Sequence[str]) -> bool:
    """Digits, a tab or a punctuation mark: a shape, not the first words of a message."""
    return any(k == "9" or k in _STRUCTURE for k in kinds)


def _most(texts: Sequence[str], test: Callable[[str], bool]) -> bool:
    """Whether at least half of ``texts`` pass ``test``."""
    step = max(1, len(texts) // TESTED)
    tried = texts[::step]
    hits = sum(1 for t in tried if test(t))
    return hits * 2 >= len(tried) and hits > 0
