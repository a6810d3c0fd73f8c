"""A signature: a literal anchor for the prefilter, a regex with named groups, and a fact kind."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cached_property

from oomdoctor.model import Scalar
from oomdoctor.units import decimal, in_range, parse

Builder = Callable[[re.Match[str]], Mapping[str, Scalar] | None]


def convert(value: str | None, gib: bool = False) -> Scalar:
    """Turn a captured group into an int, a float or a string (None stays None).

    A number outside the physical range (units.in_range: an infinity, a NaN, 10^400, or a size
    over units.MAX_GIB when ``gib``) becomes None: it is not believed."""
    if value is None:
        return None
    number = parse(value)
    if number is None and "," in value:  # a decimal comma (`avail mem=70,50 GB`), 1,024
        number = decimal(value)
    if number is None:
        return value
    return number if in_range(number, gib) else None


def groups(match: re.Match[str]) -> dict[str, Scalar]:
    return {k: convert(v) for k, v in match.groupdict().items()}


class Signature:
    """How one kind of fact is recognised.

    ``anchors`` are literal substrings; a line is only matched against ``pattern`` when it
    contains one of them, which lets one fast scan find every candidate line of a large log.
    ``build`` turns the match into the fact's data; returning None rejects the match. The regex
    is compiled the first time an anchor hits (most never do, and start-up time matters). A
    plain class, not a frozen dataclass, for the same reason: defining one costs most of a
    millisecond. Signatures are not changed once made.
    """

    def __init__(
        self,
        kind: str,
        anchors: tuple[str, ...],
        source: str,
        flags: int = 0,
        build: Builder = groups,
        description: str = "",
    ) -> None:
        self.kind = kind
        self.anchors = anchors
        self.source = source
        self.flags = flags
        self.build = build
        self.description = description

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)

    @cached_property
    def sizes(self) -> frozenset[str]:
        """The groups the pattern reads as memory sizes (a GB, GiB or MiB unit follows them),
        held to units.MAX_GIB; keys a builder names ``*_gib`` are sizes too."""
        return size_groups(self.source)


#: A named group, its body (escapes and unnamed groups inside), then what follows it: a unit of
#: memory (`(?P<avail>[\d.]+) GB`, `(?P<w>-?[\d.]+)GiB`, `(?P<initial>[\d.]+)(?: GiB)?`,
#: `(?P<w>[\d.]+) Gi?B`) or a slash before another group (`(?P<free>...)/(?P<total>...) GiB`).
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?:[^()\\]|\\.|\((?!\?P<)(?:[^()\\]|\\.)*\))*\)")
_UNIT = re.compile(r"(?:\(\?:)?(?: |\\s[*+?]?)?\??(?:GB|GiB|Gib|Gi\??B|Gi\[Bb\]|MiB|MB)")


def size_groups(source: str) -> frozenset[str]:
    """The named groups of a regex source that a unit of memory follows."""
    out: set[str] = set()
    pending: list[str] = []  # groups joined by `/` to the next one (`free/total GiB`)
    for m in _GROUP.finditer(source):
        pending.append(m.group("name"))
        if _UNIT.match(source, m.end()):
            out.update(pending)
        if not source.startswith("/", m.end()):
            pending = []
    return frozenset(out)


def sig(
    kind: str,
    anchors: str | tuple[str, ...],
    pattern: str,
    build: Builder = groups,
    flags: int = 0,
    description: str = "",
) -> Signature:
    return Signature(
        kind=kind,
        anchors=(anchors,) if isinstance(anchors, str) else anchors,
        source=pattern,
        flags=flags,
        build=build,
        description=description,
    )
