"""The records the judgement stage hands to rules, advice and reports."""

from typing import NamedTuple

from oomdoctor.model import Frame, Line


def frame_name(frame: Frame) -> str:
    """A frame as a report names it: the file's last two path parts, its line and function."""
    parts = frame.path.replace("\\", "/").rsplit("/", 2)
    return f"{'/'.join(parts[-2:])}:{frame.lineno} {frame.func}"


class Decision(NamedTuple):
    """One judgement (a phase, a site, who holds memory, whether a request fits): its value, the
    line that decided it, and the reasoning or arithmetic in one line a report can show."""

    value: str
    why: str
    line: Line | None = None
    strength: float = 0.0  # 0 (a default) .. 1 (the log says it in so many words)
