"""An input file is read through the descriptor it was opened with, never reopened by its name.

A log that is rotated, truncated or removed while it is read would otherwise change under the
reader: the forked readers of a big file (read/parallel.py) reopened it by path and read the new
file's bytes, or failed with the old one gone. ``fd_path`` names the open descriptor itself
(``/proc/self/fd/N``, which forked workers inherit); ``Held`` remembers what was opened and says,
after the read, what happened to the name meanwhile.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

_PROC_FD = Path("/proc/self/fd")


def fd_path(stream: BinaryIO, path: Path) -> Path:
    """A path that opens the very file ``stream`` holds (``path`` itself where /proc is not)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return path
    held = _PROC_FD / str(fd)
    return held if _PROC_FD.is_dir() else path


class Held:
    """The identity and size of an open input, taken when it was opened."""

    __slots__ = ("dev", "ino", "label", "name", "size", "stream")

    def __init__(self, stream: BinaryIO, name: str, label: str) -> None:
        self.stream = stream
        self.name = name
        self.label = label
        try:
            st = os.fstat(stream.fileno())
        except (OSError, ValueError, AttributeError):
            self.dev = self.ino = self.size = -1
            return
        regular = (st.st_mode & 0o170000) == 0o100000
        self.dev, self.ino = st.st_dev, st.st_ino
        self.size = st.st_size if regular else -1

    def notices(self) -> list[str]:
        """What happened to the file while it was read (nothing: an empty list)."""
        if self.size < 0:
            return []
        out = []
        try:
            now = os.fstat(self.stream.fileno()).st_size
        except (OSError, ValueError):
            now = self.size
        if now < self.size:
            out.append(
                f"{self.label}: truncated while it was read ({self.size:,} bytes when opened, "
                f"{now:,} after); only what was still there was read"
            )
        try:
            st = Path(self.name).stat()
        except FileNotFoundError:
            out.append(f"{self.label}: removed while it was read; it was read as it was opened")
            return out
        except OSError:
            return out
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            out.append(
                f"{self.label}: the name now belongs to another file (rotated or replaced while "
                "it was read); the file as it was opened was read"
            )
        return out
