"""Digests the freshness test recomputes: the generator's own source, and a table file's."""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def source_digest(directory: Path = HERE) -> str:
    """sha256 over the generator's files (``*.py`` and ``seeds.toml``), by name, in order."""
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.suffix in (".py", ".toml"):
            h.update(path.name.encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
