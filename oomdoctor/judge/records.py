"""The records the judgement stage hands to rules, advice and reports."""

from typing import NamedTuple

from oomdoctor.model import Line


class Decision(NamedTuple):
    """One judgement (a phase, a site, who holds memory, whether a request fits): its value, the
    line that decided it, and the reasoning or arithmetic in one line a report can show."""

    value: str
    why: str
    line: Line | None = None
    strength: float = 0.0  # 0 (a default) .. 1 (the log says it in so many words)
