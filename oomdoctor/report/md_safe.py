"""Put untrusted log text into Markdown so it cannot become live Markdown, HTML, a link, a
mention or a cross-reference, on GitHub (cmark-gfm) or any CommonMark renderer.

Two ways in, and no other:

- :func:`fence` / :func:`fence_lines`: a fenced block whose fence is longer than any backtick
  or tilde run inside it, so nothing inside can close it; :func:`fence_lines` also keeps one
  item on one line (a newline in a value shows as ``␊``), so a value cannot add lines to a diff.
- :func:`escape` / :func:`code`: one line for prose, tables and headings. ``escape`` backslashes
  every character that could start Markdown or HTML, breaks autolinks (``https\\://``,
  ``evil\\.example``: the backslash escape renders as nothing, but neither the GFM autolink
  extension nor linkify sees a URL, ``www.`` or a domain) and puts a WORD JOINER (U+2060,
  invisible) after ``@`` and ``#`` before a name or number, so GitHub neither pings
  ``@someone`` nor links ``#123``.

Control characters are made visible first (``labels.visible``): a terminal shows Markdown too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from oomdoctor.report.labels import one_line, visible

_RUNS = re.compile(r"`+|~+")
_BACKTICKS = re.compile(r"`+")
#: An info string is ours (``diff``, ``sh``): keep it to characters that cannot end the fence line.
_INFO = re.compile(r"[^A-Za-z0-9_+.-]")
# Characters that can start emphasis, code, links, images, HTML, entities, math, headings or
# table cells anywhere in a line. ('#' anywhere: a trailing "#" run would close a heading.) An
# underscore inside a word (``y_min``, ``startup_kv_alloc``) starts no emphasis in CommonMark:
# it stays as it is, so the source reads as plain text.
_SPECIAL = re.compile(r"([\\`*\[\]<>!|~&$#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# At the start of a line these open a list (a marker and a space), a setext heading or a
# thematic break (a line of "-", "=", "+" only); "#" and ">" are escaped everywhere by _SPECIAL.
# "-5.40 GiB", "--flag" and "78.00 GiB" open nothing and keep their characters.
_LINE_START = re.compile(r"^(\s*)(?:([+\-])(?=\s|$)|([=\-])(?=[=\-\s]*$)|(\d{1,9})([.)])(?=\s|$))")
#: The colon after a URI scheme ("https://", "mailto:", "xmpp:"), which the GFM autolink
#: extension and linkify key on. Any letter before it: a scheme can follow an escaped "_".
_SCHEME = re.compile(r"(?<=[A-Za-z]):(?=\S)")
#: A dot between a word and a letter, as in a domain ("evil.example", "www.x", "a@b.com").
_DOT = re.compile(r"(?<=\w)\.(?=[^\W\d_])")
#: "@name" pings on GitHub and "#123" cross-links; so do "org/repo#123" and "a@b.com".
_HANDLE = re.compile(r"([@#])(?=\w)")
WORD_JOINER = "\u2060"


def fence(text: str, info: str = "text") -> str:
    """A fenced block whose fence is longer than any backtick or tilde run inside the text."""
    body = visible(str(text))  # keeps newlines and tabs; a CR would end a line too
    longest = max((len(m) for m in _RUNS.findall(body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{_INFO.sub('', info)}\n{body}\n{ticks}"


def fence_lines(lines: Iterable[object], info: str = "text") -> str:
    """:func:`fence` of one line per item, whatever newlines an item holds (shown as ``␊``)."""
    return fence("\n".join(one_line(x) for x in lines), info)


def code(text: object) -> str:
    """An inline code span that survives any backticks inside, on one line."""
    flat = " ".join(visible(str(text)).split())
    longest = max((len(m) for m in _BACKTICKS.findall(flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def escape(text: object, start: bool = True) -> str:
    """Plain text, on one line, that renders as itself: no Markdown, HTML, link or mention.
    ``start=False``: the text goes after other text on its line (no list can start there)."""
    raw = visible(str(text))
    flat = " ".join(raw.split())
    if raw[:1].isspace() and not start:
        flat = " " + flat  # a fragment keeps the space that parts it from what is before it
    if raw[-1:].isspace() and flat.strip():
        flat += " "
    flat = _SPECIAL.sub(r"\\\1", flat)
    flat = _DOT.sub(r"\\.", _SCHEME.sub(r"\\:", flat))
    flat = _HANDLE.sub(rf"\1{WORD_JOINER}", flat)
    return _LINE_START.sub(_escape_line_start, flat) if start else flat


def _escape_line_start(m: re.Match[str]) -> str:
    if m.group(2) or m.group(3):  # "- x", "+ x", "---", "==="
        return f"{m.group(1)}\\{m.group(2) or m.group(3)}"
    return f"{m.group(1)}{m.group(4)}\\{m.group(5)}"  # "1. x" → "1\. x"


#: What reads as code in our own sentences: a span the text already marks (`dmesg -T`), a flag
#: with its value (``--mem-fraction-static 0.82``), an environment setting
#: (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), a source file (``model_runner.py:1317``)
#: or a size (``3.96 GiB``). Other numbers stay prose: mid-line they need no escape.
_CODE_LIKE = re.compile(
    r"`(?P<span>[^`\n]+)`"
    r"|(?P<flag>(?<![\w-])--[a-z][\w.-]*[a-z0-9]"
    r"(?:[ =](?:-?\d[\d,.]*\d|-?\d|[a-z0-9_]*\d[a-z0-9_]*)(?![\w.]))?)"
    r"|(?P<env>(?<![\w-])[A-Z][A-Z0-9_]{2,}=[\w.:,+-]*\w)"
    r"|(?P<path>(?<![\w./-])[\w./-]*\w\.(?:py|pyx|cpp|cc|cu|cuh|h|hpp|so)(?::\d+)?(?![\w.]))"
    r"|(?P<size>(?<![\w.])-?\d[\d,]*(?:\.\d+)?\s?(?:GiB|MiB|KiB|TiB|GB|MB)\b)"
)


def prose(text: object) -> str:
    """One line of our own words (which may quote log text) for Markdown: flags, settings,
    sizes and numbers in code spans, so the source reads as plain text with no escapes in them,
    and everything else through :func:`escape`."""
    flat = " ".join(visible(str(text)).split())
    out: list[str] = []
    last = 0
    for m in _CODE_LIKE.finditer(flat):
        if m.start() > last:
            out.append(escape(flat[last : m.start()], start=not out))
        out.append(code(m.group("span") if m.group("span") is not None else m.group()))
        last = m.end()
    if last < len(flat) or not out:
        out.append(escape(flat[last:], start=not out))
    return "".join(out)
