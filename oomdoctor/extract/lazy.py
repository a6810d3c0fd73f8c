"""Regexes compiled the first time they are used.

Compiling a pattern costs a fraction of a millisecond, and a module-level table of them is paid
on every start, even when a run never meets the lines they are for (most log formats, most
secret shapes). ``LazyPattern`` holds the source and compiles it on the first call; from then on
the compiled pattern's own methods answer directly (they shadow the class's), so a hot loop pays
nothing for the laziness.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, AnyStr, Generic

#: The methods forwarded to the compiled pattern.
_METHODS = ("match", "search", "fullmatch", "finditer", "findall", "split", "sub")


class LazyPattern(Generic[AnyStr]):
    """``re.compile(pattern, flags)``, done on first use. An invalid pattern raises there."""

    def __init__(self, pattern: AnyStr, flags: int = 0) -> None:
        self.pattern: AnyStr = pattern
        self._flags = flags

    def compiled(self) -> re.Pattern[AnyStr]:
        """The compiled pattern (compiled now if it was not yet)."""
        found = self.__dict__.get("_compiled")
        if found is not None:
            return found  # type: ignore[no-any-return]
        compiled = re.compile(self.pattern, self._flags)
        self.__dict__.update({name: getattr(compiled, name) for name in _METHODS})
        self.__dict__["_compiled"] = compiled
        return compiled

    def match(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[AnyStr] | None:
        return self.compiled().match(string, pos, endpos)

    def search(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[AnyStr] | None:
        return self.compiled().search(string, pos, endpos)

    def fullmatch(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[AnyStr] | None:
        return self.compiled().fullmatch(string, pos, endpos)

    def finditer(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[AnyStr]]:
        return self.compiled().finditer(string, pos, endpos)

    def findall(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled().findall(string, pos, endpos)

    def split(self, string: AnyStr, maxsplit: int = 0) -> list[AnyStr | Any]:
        return self.compiled().split(string, maxsplit)

    def sub(
        self,
        repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr],
        string: AnyStr,
        count: int = 0,
    ) -> AnyStr:
        return self.compiled().sub(repl, string, count)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}, {self._flags})"
