"""What wrapper an input came in, learned from its head: the plan the reader follows.

In order: newest-first lines (order.py), JSON lines (jsonlines.py), CRI's partial lines, the
prefix most lines share (shape.py), a soft or hard wrap (wrapping.py), and the record head most
lines start with (a record that lost its line break, a progress bar running into it, is split
there). A plain log's plan is empty and costs the reader nothing but this look at its head.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from oomdoctor.extract import jsonlines, order, shape, wrapping
from oomdoctor.extract.joiner import Joiner
from oomdoctor.extract.jsonlines import JsonPlan
from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.extract.normalise import clean, known_at, normalise, outer_length
from oomdoctor.extract.shape import Template
from oomdoctor.extract.wrapping import Wrap

#: The head looked at: this many lines, at most SAMPLE_BYTES.
SAMPLE_LINES = 200
SAMPLE_BYTES = 64 << 10
#: Share of the sample's lines a prefix must start (a wrapper writes it before every line).
PREFIX_SHARE = 0.85
#: ... and to be taken off the lines when their wrap is read (what a wrap carried over lacks it).
PROBE_SHARE = 0.5
#: Share of lines an envelope must start for it to be sought inside lines.
HEAD_SHARE = 0.5
HEAD_CHARS = 12
#: The envelope is learned from at most about this many lines.
HEADS_FROM = 24
_HEAD_ENDS = frozenset("])|:")
_PUNCTUATION = frozenset("|>]):}\t=/[(-")
#: CRI (containerd, CRI-O: `/var/log/pods/...`): `<RFC 3339 time> <stream> <P|F> <text>`.
_QUOTE = LazyPattern(r"^(?: {0,3}> ?)+")
_CRI = LazyPattern(r"^(?P<ts>\S+) (?P<stream>stdout|stderr) (?P<tag>[PF]) ?(?P<text>.*)$", re.S)
CRI_SHARE = 0.8
#: Wraps of wraps undone, at most.
MAX_WRAPS = 2


class Plan(NamedTuple):
    """How to read one input. Only ``reverse``, ``json``, ``cri`` and ``wraps`` rewrite lines;
    ``prefix`` and ``head`` are applied to each candidate line by the extractor."""

    reverse: bool = False
    json: JsonPlan | None = None
    cri: bool = False
    prefix: Template | None = None
    wraps: tuple[Wrap, ...] = ()  # outermost first (a terminal's cut of a mail's wrap)
    head: Template | None = None

    @property
    def rewrites(self) -> bool:
        """Whether lines are rewritten (joined, unpacked, reordered) before the scanner."""
        return self.reverse or self.json is not None or self.cri or bool(self.wraps)

    def describe(self) -> list[str]:
        """What was found, in words (for the report's notices)."""
        out = []
        if self.reverse:
            out.append("its lines were newest first: they were read oldest first")
        if self.json is not None:
            out.append(f"JSON lines: the log text read from field {'.'.join(self.json.text)!r}")
        if self.cri:
            out.append("CRI container log: partial lines (P) were joined")
        for wrap in self.wraps:
            kind = "soft" if wrap.soft else "hard"
            out.append(f"lines {kind}-wrapped at {wrap.width} columns were joined")
        return out


def _cri(lines: Sequence[str]) -> list[str] | None:
    """The sample's records with CRI's partial lines joined, or None when it is not CRI."""
    body = [ln for ln in lines if ln.strip()]
    matches = [_CRI.match(ln) for ln in body]
    if not body or sum(1 for m in matches if m) < CRI_SHARE * len(body):
        return None
    out: list[str] = []
    pending: dict[str, str] = {}
    for m, line in zip(matches, body, strict=True):
        if m is None:
            out.append(line)
            continue
        stream, text = m.group("stream"), m.group("text")
        if m.group("tag") == "P":
            pending[stream] = pending.get(stream, f"{m.group('ts')} ") + text
            continue
        out.append(pending.pop(stream, f"{m.group('ts')} ") + text)
    return out


def detect(head: Sequence[str], anchors: Sequence[str]) -> Plan:
    """The plan for an input whose head is ``head`` (decoded, without line ends; the first
    SAMPLE_LINES are looked at, the rest only to learn a prefix that a wrap hides)."""
    raw = [ln.rstrip("\r") for ln in head[:SAMPLE_LINES]]
    if not any(ln.strip() for ln in raw):
        return Plan()
    reverse = order.newest_first([clean(ln) for ln in raw])
    json = jsonlines.detect(raw[::-1] if reverse else raw)
    raw, cri = _records(raw, reverse, json)
    lines = [clean(ln) for ln in raw]  # as normalise reads them

    def forbidden(head: str) -> bool:
        return any(a in head for a in anchors)

    prefix = shape.learn(lines, PREFIX_SHARE, known_at, forbidden)
    wraps: list[Wrap] = []
    records = lines
    # what the wraps are read on: without the prefix, or one that half the lines have (a wrap
    # keeps it off the lines it carried over)
    probe = prefix or shape.learn(lines, PROBE_SHARE, known_at, forbidden)
    for _ in range(MAX_WRAPS):  # a wrap of a wrap: a terminal's copy of a re-wrapped paste
        carried = prefix or probe  # what the lines carry when this wrap is read
        wrap = wrapping.detect(records, _stripper(carried), raw)
        if wrap is None:
            break
        wraps.append(wrap._replace(pieces=carried.regex if carried is not None else None))
        raw = records = _starts(raw, wrap, carried)
        if prefix is None:  # on the records, the prefix the pieces lacked shows
            prefix = shape.learn(records, PREFIX_SHARE, known_at, forbidden)
    if wraps:
        # A prefix on every record, but not on the rest of a record a wrap broke (or only the
        # outer part of it: a quote of a compose log): learn it from the lines that start
        # records, in the whole head (a long record a wrap broke can fill the first
        # SAMPLE_LINES).
        records, _ = _records([ln.rstrip("\r") for ln in head], reverse, json)
        for wrap in wraps:
            records = _starts(records, wrap, _template(wrap.pieces))
        whole = shape.learn(records, PREFIX_SHARE, known_at, forbidden)
        if whole is not None and (prefix is None or len(whole.shape) > len(prefix.shape)):
            prefix = whole
    # Where the prefix is on fewer lines than PREFIX_SHARE but on half of them (a wrap that did
    # not show, another paste's lines among them), it is still taken off where it fits.
    if prefix is None and probe is not None and any(k in _PUNCTUATION for k in probe.shape):
        prefix = probe  # not a bare number: on half the lines that is a notebook's code lines
    return Plan(reverse, json, cri, prefix, tuple(wraps), _record_head(lines, prefix))


def _records(raw: Sequence[str], reverse: bool, json: JsonPlan | None) -> tuple[list[str], bool]:
    """The sample's lines in time order, unpacked from their JSON records, CRI's partial
    lines joined; and whether they were CRI."""
    out = list(raw[::-1] if reverse else raw)
    if json is not None:
        out = [p for ln in out for p in (jsonlines.unpack(ln, json) or [ln])]
    cri = _cri(out)
    return (cri, True) if cri is not None else (out, False)


def _record_head(lines: Sequence[str], prefix: Template | None) -> Template | None:
    """The envelope most records start with (the outermost known prefix, else the logger's
    envelope), as a template, when most lines have one: where it shows inside a line, a
    record lost its line break before it."""
    regex = prefix.compiled() if prefix is not None else None
    body = [ln for ln in lines if ln.strip()]
    body = body[:: max(1, len(body) // HEADS_FROM)]
    heads = []
    for line in body:
        text = clean(line)
        if regex is not None and (m := regex.match(text)):
            text = text[m.end() :]
        # the outermost known prefix (a process's `(Name pid=N) `), else the logger's envelope
        cut = outer_length(text) or len(text) - len(normalise(text).text)
        heads.append(text[:cut])
    heads = [h for h in heads if h.strip()]
    if len(heads) < HEAD_SHARE * len(body):
        return None
    head = shape.learn(heads, PREFIX_SHARE, min_chars=HEAD_CHARS)
    # A digit in it (a time, a PID), and a closing mark at its end (`]`, `)`, `|`, `:`): a shape
    # that a message's text does not take by chance.
    if head is None or "9" not in head.shape or head.shape.rstrip()[-1:] not in _HEAD_ENDS:
        return None
    return head


def _template(regex: str | None) -> Template | None:
    return Template(regex, "", 1.0) if regex is not None else None


def body_regex(prefix: Template | None) -> re.Pattern[str]:
    """What comes before a line's body for a wrap: the learned prefix, or a Markdown quote's
    marks (a quote with a line of its own above it, a chat message's header, has no prefix
    to learn)."""
    return prefix.compiled() if prefix is not None else _QUOTE.compiled()


def _stripper(prefix: Template | None) -> Callable[[str], str]:
    """A line's body for a wrap (``body_regex``)."""
    regex = body_regex(prefix)

    def body(line: str) -> str:
        m = regex.match(line)
        return line[m.end() :] if m is not None else line

    return body


def _starts(lines: Sequence[str], wrap: Wrap, prefix: Template | None) -> list[str]:
    """The sample's records, the pieces ``wrap`` broke them into joined."""
    out: list[str] = []
    joiner = Joiner(wrap, body_regex(prefix), lambda _n, text: out.append(text))
    for n, line in enumerate(lines):
        joiner.push(n, line)
    joiner.close()
    return out
