"""A signature: a literal anchor for the prefilter, a regex with named groups, and a fact kind."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

from oomdoctor.model import Scalar

Builder = Callable[[re.Match[str]], Mapping[str, Scalar] | None]


def convert(value: str | None) -> Scalar:
    """Turn a captured group into an int, a float or a string (None stays None)."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def groups(match: re.Match[str]) -> dict[str, Scalar]:
    return {k: convert(v) for k, v in match.groupdict().items()}


@dataclass(frozen=True)
class Signature:
    """How one kind of fact is recognised.

    ``anchors`` are literal substrings; a line is only matched against ``pattern`` when it
    contains one of them, which lets one fast scan find every candidate line of a large log.
    ``build`` turns the match into the fact's data; returning None rejects the match. The regex
    is compiled the first time an anchor hits (most never do, and start-up time matters).
    """

    kind: str
    anchors: tuple[str, ...]
    source: str
    flags: int = 0
    build: Builder = groups
    description: str = ""

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)


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
