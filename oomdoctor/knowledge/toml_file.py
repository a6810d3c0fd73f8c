"""Read one TOML file of rules or knowledge: the text and its table, or one ``file:line: message``.

tomllib recurses once per level of nested arrays and inline tables, so a file nested thousands
deep raises RecursionError instead of a TOMLDecodeError; that is reported like any other syntax
error, at the line where the nesting passes MAX_DEPTH.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: Arrays and inline tables nested deeper than this are refused (a rule needs three or four).
MAX_DEPTH = 100
#: What can open or close a level, or hide brackets from it (strings, comments).
_TOKEN = re.compile(r"""[\[\]{}\n#]|'''|\"\"\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'""")


def read(path: Path, invalid: str = "invalid TOML") -> tuple[str, dict[str, Any]] | str:
    """``(text, table)``, or the problem as ``file:line: message`` (``invalid`` names a syntax
    error, as each loader words it)."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}:1: cannot read: {exc}"
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        return f"{path}:{m.group(1) if m else 1}: {invalid}: {exc}"
    except RecursionError:
        line = too_deep(text) or 1
        return f"{path}:{line}: {invalid}: arrays or tables nested more than {MAX_DEPTH} deep"


def too_deep(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The line where brackets and braces (outside strings and comments) first nest deeper than
    ``limit``, or None."""
    depth, line = 0, 1
    comment = False
    multiline: str | None = None
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token == "\n":
            line += 1
            comment = False
        elif comment:
            continue
        elif multiline is not None:
            if token == multiline:
                multiline = None
            line += token.count("\n")
        elif token in ("'''", '"""'):
            multiline = token
        elif token == "#":
            comment = True
        elif token in "[{":
            depth += 1
            if depth > limit:
                return line
        elif token in "]}":
            depth = max(depth - 1, 0)
    return None
