"""Read one TOML file of rules or knowledge: the text and its table, or one ``file:line: message``.

tomllib recurses once per level of nested arrays and inline tables, so a file nested thousands
deep raises RecursionError instead of a TOMLDecodeError; that is reported like any other syntax
error, at the line where the nesting passes MAX_DEPTH.

tomllib is pure Python: parsing the shipped files (the built-in rules, engines.toml)
was a tenth of a short run. ``builtin_tables.json`` beside this file holds their tables, keyed by
each file's exact text; a file whose text is there is not parsed again, any other text (an edited
built-in file, a user's rule) is parsed as always. tests/test_toml_cache.py checks the cache is
current; ``python -m oomdoctor.knowledge.toml_file`` writes it anew.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from oomdoctor.extract.lazy import LazyPattern

#: Arrays and inline tables nested deeper than this are refused (a rule needs three or four).
MAX_DEPTH = 100
#: What can open or close a level, or hide brackets from it (strings, comments).
_TOKEN = LazyPattern(r"""[\[\]{}\n#]|'''|\"\"\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'""")
#: The parsed shipped files: {text: its table as JSON}.
CACHE = Path(__file__).with_name("builtin_tables.json")


def read(path: Path, invalid: str = "invalid TOML") -> tuple[str, dict[str, Any]] | str:
    """``(text, table)``, or the problem as ``file:line: message`` (``invalid`` names a syntax
    error, as each loader words it)."""
    from oomdoctor.read.bounded import BoundedError, read_text

    try:
        text = read_text(path)  # a regular file of bounded size: not /dev/zero, not a FIFO
    except BoundedError as exc:
        return f"{path}:1: cannot read: {str(exc).removeprefix(f'{path}: ')}"
    cached = _cached().get(text)
    if cached is not None:
        return text, json.loads(cached)  # a table of its own: callers may change it
    tomllib = _tomllib()
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        return f"{path}:{m.group(1) if m else 1}: {invalid}: {exc}"
    except RecursionError:
        line = too_deep(text) or 1
        return f"{path}:{line}: {invalid}: arrays or tables nested more than {MAX_DEPTH} deep"


def _tomllib() -> Any:
    """tomllib (tomli before 3.11), imported only when a text is not in the cache."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib


@lru_cache(maxsize=1)
def _cached() -> Mapping[str, str]:
    """The cache of the shipped files (empty when it is missing or unreadable)."""
    try:
        table = json.loads(CACHE.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


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


def shipped_files() -> list[Path]:
    """The TOML files the package ships: the built-in rules and the knowledge tables."""
    from oomdoctor.knowledge import RESERVED_FILES
    from oomdoctor.rules.schema import builtin_dir

    rules = sorted(p for p in builtin_dir().glob("*.toml") if p.name not in RESERVED_FILES)
    return [*rules, *sorted(CACHE.parent.glob("*.toml"))]


def cache_text(paths: Iterable[Path]) -> str:
    """What ``builtin_tables.json`` holds for ``paths``: each file that parses, and whose table
    JSON gives back exactly (no dates, no NaN), under its text."""
    tomllib = _tomllib()
    out: dict[str, str] = {}
    for path in paths:
        text = path.read_text("utf-8")
        try:
            table = tomllib.loads(text)
            encoded = json.dumps(table, ensure_ascii=False, allow_nan=False)
        except (tomllib.TOMLDecodeError, RecursionError, TypeError, ValueError):
            continue
        if same(json.loads(encoded), table):
            out[text] = encoded
    return json.dumps(out, ensure_ascii=False, indent=0) + "\n"


def same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down (``1`` is not ``1.0``, nor ``True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


if __name__ == "__main__":  # pragma: no cover - run by hand after changing a shipped file
    CACHE.write_text(cache_text(shipped_files()), "utf-8")
    print(f"wrote {CACHE}")
