"""Why a command could not be started, worded and numbered as a shell does it.

127: not found (no such command, or a script whose ``#!`` interpreter is missing); 126: found
but not runnable (no execute permission, a directory, a binary of another format).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

NOT_FOUND = 127
NOT_RUNNABLE = 126


def _located(command: str) -> Path | None:
    """The file ``command`` names: a path as given, or what PATH finds (executable or not)."""
    if os.sep in command:
        return Path(command) if os.path.lexists(command) else None
    found = shutil.which(command)
    if found is not None:
        return Path(found)
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = Path(directory or ".") / command
        if candidate.is_file():
            return candidate
    return None


def _interpreter(path: Path) -> str | None:
    """The interpreter a ``#!`` line names (None when the file has none or cannot be read)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return os.fsdecode(words[0]) if words else None


def explain(command: str, exc: OSError) -> tuple[int, str]:
    """The shell status and the one-line reason ``command`` could not run."""
    shown = repr(command)
    path = _located(command)
    code = exc.errno
    if code == errno.ENOENT:
        if path is None:
            return NOT_FOUND, f"cannot run {shown}: no such command"
        if path.is_symlink() and not path.exists():
            return NOT_FOUND, f"cannot run {shown}: a symlink to a file that does not exist"
        interpreter = _interpreter(path)
        if interpreter is not None:
            return NOT_FOUND, (
                f"cannot run {shown}: its interpreter {interpreter!r} (the #! line) is not found"
            )
        return NOT_FOUND, (
            f"cannot run {shown}: a file it needs (its ELF interpreter or loader) is not found"
        )
    if code == errno.EACCES:
        if path is not None and path.is_dir():
            return NOT_RUNNABLE, f"cannot run {shown}: is a directory"
        interpreter = _interpreter(path) if path is not None else None
        if path is not None and os.access(path, os.X_OK) and interpreter is not None:
            return NOT_RUNNABLE, (
                f"cannot run {shown}: its interpreter {interpreter!r} (the #! line) is not "
                "executable"
            )
        return NOT_RUNNABLE, f"cannot run {shown}: permission denied (not executable)"
    if code == errno.ENOEXEC:
        return NOT_RUNNABLE, (
            f"cannot run {shown}: not an executable format (exec format error: a damaged binary, "
            "one for another machine, or a script without a #! line)"
        )
    return NOT_RUNNABLE, f"cannot run {shown}: {exc.strerror or exc}"
