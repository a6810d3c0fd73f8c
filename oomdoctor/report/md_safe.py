"""Put untrusted log text into Markdown so it cannot become live Markdown or HTML."""

from __future__ import annotations

import re

_BACKTICKS = re.compile(r"`+")
# Characters that can start emphasis, code, links, images, HTML, entities or table cells anywhere.
_SPECIAL = re.compile(r"([\\`*_\[\]<>!|~&])")
# At the start of a line these open a heading, a list, a block quote or a thematic break.
_LINE_START = re.compile(r"^(\s*)(?:([#+\-=>])|(\d+)([.)]))")


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
    """Plain text, on one line, with every character that could become Markdown or HTML escaped."""
    flat = _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
    return _LINE_START.sub(_escape_line_start, flat)


def _escape_line_start(m: re.Match[str]) -> str:
    if m.group(2):  # "# x", "- x", "> x"
        return f"{m.group(1)}\\{m.group(2)}"
    return f"{m.group(1)}{m.group(3)}\\{m.group(4)}"  # "1. x" → "1\. x"
