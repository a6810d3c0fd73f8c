"""A progress bar on stderr for big inputs (rich, transient), and nothing otherwise.

Shown only when stderr is a terminal and the input is over THRESHOLD bytes: known sizes (regular
files, stdin redirected from a file) start it at once; a pipe of unknown size starts a bar without
a total once THRESHOLD bytes have gone by. rich.progress is imported only when a bar is shown, so
small runs do not pay for it.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

THRESHOLD = 50 * 1000 * 1000


class Bar:
    """The ``progress`` callback of ``pipeline.read``: call it with the input bytes consumed."""

    def __init__(self, total: int | None, stream: TextIO) -> None:
        self.total = total
        self.done = 0
        self._stream = stream
        self._progress: Any = None
        self._task: Any = None

    def __call__(self, advance: int) -> None:
        self.done += advance
        if self._progress is None:
            if max(self.total or 0, self.done) < THRESHOLD:
                return
            self._start()
        self._progress.update(self._task, completed=self.done)

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("reading"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(file=self._stream),
            transient=True,
        )
        self._task = self._progress.add_task("read", total=self.total)
        self._progress.start()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def for_inputs(names: Sequence[str], stream: TextIO | None = None) -> Bar | None:
    """A bar for these inputs if stderr is a terminal, else None (no bar, no cost)."""
    stream = stream if stream is not None else sys.stderr
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return Bar(_total(names), stream)


def _total(names: Sequence[str]) -> int | None:
    """The bytes to read, or None when an input's size is unknown (a pipe)."""
    total = 0
    for name in names:
        try:
            st = os.fstat(sys.stdin.fileno()) if name == "-" else Path(name).stat()
        except (OSError, ValueError, AttributeError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        total += st.st_size
    return total
