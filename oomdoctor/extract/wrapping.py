"""Records a wrap broke over several lines, told from the line lengths of the log itself.

Two kinds of wrap reach a user:
- **soft**: a terminal copy cuts every long line at exactly its width, mid-word, with no indent.
  The lengths pile up *at* a ceiling: many lines exactly W characters long, none longer.
- **hard**: an email, a PR body or an editor breaks at the last space before the width, maybe
  indenting what follows. The lengths pile up *just below* a ceiling, and a line was cut where the
  next line's first word would not have fitted on it.

The width is learned from the sample (the ceiling), the indent of continuation lines too. A line
is joined to the next only where the evidence says it was cut: its length is at the ceiling (soft)
or the next word would have overflowed it (hard), and the next line does not start a record of
its own (an envelope, a traceback's head or frame, an exception line, a blank line). A normal
log's long lines are not joined: they are followed by records, or they are not at a ceiling.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.extract.normalise import known_at
from oomdoctor.extract.normalise import normalise as _normalise

#: Narrower than this is not a terminal or a mail client, wider is not either.
MIN_WIDTH = 40
MAX_WIDTH = 500
#: Lines a wrap must have cut in the sample before its width is believed.
MIN_CUTS = 2
#: ... and at least this share of the sample's lines that reach near the ceiling.
CUT_SHARE = 0.3
#: One cut alone is believed only in a line at least this long (a terminal's width, or a mail
#: client's less a margin), and only with the text's own evidence (a word or a sentence cut).
LONE_WIDTH = 80
#: A joined record stops growing here (a runaway join cannot swallow the log).
MAX_RECORD = 256 << 10
_RECORD_HEADS = (
    "Traceback (most recent call last)",
    'File "',
    "During handling of the above exception",
    "The above exception was the direct cause",
)
_EXCEPTION = LazyPattern(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)(?::|$)"
)
_QUALIFIED = LazyPattern(r"^[A-Za-z_][\w.]*$")
_COMPLETE_FRAME = LazyPattern(r'^\s*File "[^"]*", line \d+, in \S+\s*$')
_CALL = LazyPattern(r"^[\w.]+\(")
CARETS = LazyPattern(r"^\s*[\^~]+\s*$")
_STAMP_HEAD = LazyPattern(r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


class Wrap(NamedTuple):
    """How the input was wrapped: the width, soft or hard, the continuation lines' indent,
    whether the width leaves out the learned prefix (``body``: each piece carries the prefix),
    and whether it counts only what a terminal shows (a tool that wraps text with its colour
    codes in counts them too)."""

    width: int
    soft: bool
    indent: int = 0
    body: bool = False
    shown: bool = True  # the width counts what a terminal shows (not colour codes)
    pieces: str | None = None  # the regex of the prefix every piece carries (None: none learned)


def starts_record(text: str, soft: bool, carried: int = 0) -> bool:
    """Whether a line (its learned prefix removed) starts a record of its own, so that it does
    not continue the line before it. (An exception line is one when it is not indented: an
    indented one is a wrap's continuation of a message that named an exception.) ``carried``:
    the indent a hard wrap gives what it carries over; a traceback's head so indented (Python
    writes it unindented), or a frame (Python indents it by two), is carried over too.
    (``soft`` is the kind of wrap asked about; both read a line alike today.)"""
    return _starts(text, carried)


@functools.lru_cache(maxsize=4096)
def _starts(text: str, carried: int) -> bool:
    """starts_record, remembered: detection asks about the same lines several times."""
    if not text.strip():
        return True
    stripped = text.lstrip()
    if stripped.startswith(_RECORD_HEADS) or _EXCEPTION.match(text):
        indent = len(text) - len(stripped)
        frame = stripped.startswith('File "')
        return not (carried and indent == carried and (not frame or carried != 2))
    if _STAMP_HEAD.match(stripped):
        return True
    return known_at(stripped)


def complete_frame(text: str) -> bool:
    """A traceback frame line that is whole: what follows it is its code line, not its rest."""
    return bool(_COMPLETE_FRAME.match(text))


def envelope_text(text: str) -> str:
    """The message of a line, its known envelopes removed."""
    return _normalise(text).text


def indent_of(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def first_word(text: str) -> int:
    word = text.split(None, 1)
    return len(word[0]) if word else 0


Body = Callable[[str], str]


def _bare(text: str) -> str:
    return text


def detect(
    lines: Sequence[str], body: Body | None = None, raw: Sequence[str] | None = None
) -> Wrap | None:
    """The wrap of a sample (lines without their line ends, colour codes removed), or None.
    ``body`` removes the learned prefix from a line: whether a line starts a record is read on
    its body, and the width is tried on the whole lines and on the bodies (a prefix written
    after the wrap). ``raw``: the lines with their colour codes, measured too when they differ."""
    strip = body or _bare
    bodies = [strip(ln) for ln in lines]
    found = [w for w in (_soft(lines, bodies), _hard(lines, bodies)) if w is not None]
    if raw is not None and list(raw) != list(lines):
        for w in (_soft(raw, bodies), _hard(raw, bodies)):
            if w is not None:
                found.append((w[0], w[1]._replace(shown=False)))
    if body is not None and bodies != list(lines):
        for w in (_soft(bodies, bodies), _hard(bodies, bodies)):
            if w is not None:
                found.append((w[0], w[1]._replace(body=True)))
    if not found:
        return None
    # A pile-up at exactly one length is a terminal's: it wins over a hard wrap's reading.
    return max(found, key=lambda w: (w[1].soft, w[0]))[1]


def _soft(texts: Sequence[str], bodies: Sequence[str]) -> tuple[int, Wrap] | None:
    """``texts``: the lines as measured; ``bodies``: the same without the learned prefix."""
    lengths = [len(t) for t in texts]
    if not lengths:
        return None
    width = max(lengths)
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        return None
    at = sum(1 for n in lengths if n == width)
    below = sum(1 for n in lengths if width - 12 <= n < width)
    cuts = [
        i
        for i in range(len(texts) - 1)
        if lengths[i] == width and soft_cut(bodies[i], bodies[i + 1])
    ]
    # A terminal cuts anywhere: what follows a cut seldom starts with spaces. (A hard wrap that
    # indents its continuation lines can also pile them up at one length.)
    indented = sum(1 for i in cuts if bodies[i + 1][:2].isspace())
    # ... and most lines at the width go on: a log's own lines that happen to share the longest
    # length (a stats line's template) are followed by records.
    went_on = len(cuts) * 5 >= 3 * sum(1 for n in lengths[:-1] if n == width)
    if len(cuts) >= MIN_CUTS and at >= below and indented * 2 <= len(cuts) and went_on:
        return len(cuts), Wrap(width, soft=True)
    if len(cuts) == 1 and at == 1 and width >= LONE_WIDTH:
        i = cuts[0]
        if _mid_word(bodies[i], bodies[i + 1]):
            return 1, Wrap(width, soft=True)
    return None


def soft_cut(here: str, nxt: str) -> bool:
    """Whether a line at a terminal's width goes on in the next one: the next does not start a
    record, and is not the code line under a frame (a cut frame goes on unindented)."""
    if CARETS.match(nxt):  # the rest of a marker line cut in its indent, or in its marks
        return here[-1:].isspace() or here[-1:] in "^~"
    if _QUALIFIED.match(envelope_text(here)) and _EXCEPTION.match(here.rsplit(" ", 1)[-1] + nxt):
        return True  # cut inside an exception's name (`torch.OutOf` / `MemoryError: `)
    if starts_record(nxt, soft=True):
        return False
    return not (complete_frame(here) and nxt[:1].isspace())


def _mid_word(here: str, nxt: str) -> bool:
    """A cut inside a word or a number (`limi` / `t: 49152`), or next to a space: no line of a
    log ends so, and none starts with a single space."""
    a, b = here[-1:], nxt[:1]
    if a == " ":  # a log line does not end with a space; a cut after one goes on
        return bool(b.strip())
    if b == " " and nxt[1:2].strip():  # one space, not an indent: a cut just before it
        return bool(a.strip())
    return (a.isalpha() and b.islower()) or (a.isdigit() and b.isdigit())


def _mid_sentence(here: str, nxt: str) -> bool:
    """A sentence that goes on (`... KV cache under` / `    --mem-fraction-static=0.9.`): the
    line ends inside it and the next starts lower case, with a digit, a path or an option, and
    is not code (`warnings.warn(`)."""
    rest = nxt.lstrip()
    ends = here[-1:]
    return (
        len(here) >= MIN_WIDTH
        and (ends.isalnum() or ends == "," or (ends == ":" and rest[:1].isdigit()))
        and (rest[:1].islower() or rest[:1].isdigit() or rest[:1] == "/" or rest[:2] == "--")
        and not _CALL.match(rest)
    )


#: Where an outer prefix may end before a logger's envelope (`svc-1  | `, `host: `): tried at
#: the first few spaces of a line.
OUTER_SPACES = 6


def bare_envelope(text: str) -> bool:
    """A line that is a logger's envelope and nothing else: a hard wrap cut its message off.
    The envelope may sit behind an outer prefix not learned yet (compose's `svc-1  | `): a line
    that ends in a whole envelope, with nothing after it, had its message cut off just the same."""
    if not text.strip():
        return False
    if known_at(text) and not envelope_text(text).strip():
        return True
    at = 0
    for _ in range(OUTER_SPACES):
        at = text.find(" ", at) + 1
        if at <= 0:
            return False
        rest = text[at:]
        if rest[:1] != " " and known_at(rest) and not envelope_text(rest).strip():
            return True
    return False


def _hard(lines: Sequence[str], bodies: Sequence[str]) -> tuple[int, Wrap] | None:
    # a hard wrap leaves no trailing spaces
    texts = [t.rstrip() for t in lines]
    bodies = [b.rstrip() for b in bodies]
    first = _hard_cuts(texts, bodies, [0] * len(texts))
    if first is None or not first[0]:
        return None
    indent = first[1]
    # A wrapper that indents what it carries over counts the width before the indent: measure
    # the lines it carried over without it, and look again.
    carried = {i + 1 for i in first[0]}
    shift = [
        indent if n in carried or (indent_of(b) == indent and not starts_record(b, False)) else 0
        for n, b in enumerate(bodies)
    ]
    again = _hard_cuts(texts, bodies, shift)
    if again is None or again[1] != indent:
        return None
    cuts, _, width = again
    sizes = [len(t) - s for t, s in zip(texts, shift, strict=True)]
    wrap = Wrap(width, soft=False, indent=indent)
    if len(cuts) == 1 and indent and _mid_sentence(*bodies[cuts[0] : cuts[0] + 2]):
        return 1, wrap
    # The longest line passes the test whatever follows it: only the shorter ones tell. A wrap
    # that does not indent what it carries over needs more of them (its continuation lines look
    # like any other line), and a pile-up of lines near the width.
    told = sum(1 for i in cuts if sizes[i] < width)
    near = sum(1 for n in sizes if n >= width - 20)
    if indent:  # several lines at the longest length, each carried on indented, tell too
        many = told >= 1 or len(cuts) > MIN_CUTS
        enough = len(cuts) >= MIN_CUTS and many and len(cuts) >= CUT_SHARE * near
    else:
        piled = sum(1 for n in sizes if width - 15 <= n <= width)
        enough = told >= MIN_CUTS + 1 and told * 2 >= near and piled >= MIN_CUTS + 1
    return (len(cuts), wrap) if enough else None


def _hard_cuts(
    texts: Sequence[str], bodies: Sequence[str], shift: Sequence[int]
) -> tuple[list[int], int, int] | None:
    """The lines a hard wrap cut (with the most common indent of what follows them), the
    indent, and the width; ``shift``: what each line's measure leaves out (its carried indent)."""
    sizes = [len(t) - s for t, s in zip(texts, shift, strict=True)]
    breakable = [n for t, n in zip(bodies, sizes, strict=True) if " " in t.strip()]
    if not breakable:
        return None
    width = max(breakable)
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        return None
    candidates: list[tuple[int, int]] = []  # (line, indent of the next)
    for i in range(len(texts) - 1):
        here, nxt = bodies[i], bodies[i + 1]
        if indent_of(nxt) and bare_envelope(here):
            candidates.append((i, indent_of(nxt)))
            continue
        if complete_frame(here) or starts_record(nxt, soft=False):
            continue
        if sizes[i] > width:
            if indent_of(nxt) and " " not in here.strip():  # a long word stood on its own
                candidates.append((i, indent_of(nxt)))
        elif CARETS.match(here):
            continue  # a marker line is never cut: nothing follows the carets
        elif sizes[i] + 1 + first_word(nxt) > width:
            candidates.append((i, indent_of(nxt)))
    if not candidates:
        return None
    indent, _ = Counter(ind for _, ind in candidates).most_common(1)[0]
    return [i for i, ind in candidates if ind == indent], indent, width
