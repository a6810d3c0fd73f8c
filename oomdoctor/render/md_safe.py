"""Put untrusted log text into Markdown so it cannot become live Markdown or HTML."""

from __future__ import annotations

import re

_BACKTICKS = re.compile(r"`+")
_TILDES = re.compile(r"~+")
_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~&])")


def fence(text: str, info: str = "text") -> str:
    """A fenced block whose fence is longer than any backtick run inside the text."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    body = text.replace("\r", "")
    return f"{ticks}{info}\n{body}\n{ticks}"


def code(text: str) -> str:
    """An inline code span that survives any backticks inside, on one line."""
    text = " ".join(text.split())
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def escape(text: str) -> str:
    """Plain text with every Markdown/HTML special character backslash-escaped, on one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
