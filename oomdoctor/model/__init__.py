"""The values that flow between the pipeline's stages.

read → normalise → extract facts → assemble the incident → judge → rules → verdict → render.
Every stage takes and returns these immutable records; none of them does I/O. They are
NamedTuples rather than frozen dataclasses because a command-line tool pays for class creation
on every start (a dataclass costs ~0.5 ms to define on Python 3.11, a NamedTuple ~0.1). Change
them with ``record._replace(field=value)``; never rely on their tuple-ness (order, unpacking,
equality across types).

No ``from __future__ import annotations`` here: typing.NamedTuple compiles every field annotation
given as a string (a ForwardRef), which made defining these records take twice as long.
"""

from oomdoctor.model.budget import Budget, RankBudget, SglangBudget, VllmBudget, Window
from oomdoctor.model.incident import Incident, Point, StatsSummary, Timeline, VersionGuess
from oomdoctor.model.log import (
    CATEGORIES,
    EMPTY,
    OOM_CATEGORIES,
    Clues,
    Fact,
    Failure,
    Frame,
    Holder,
    Line,
    Measured,
    OomMessage,
    RankMemory,
    Scalar,
    number,
)
from oomdoctor.model.verdict import Action, Alternative, Verdict

__all__ = [
    "CATEGORIES",
    "EMPTY",
    "OOM_CATEGORIES",
    "Action",
    "Alternative",
    "Budget",
    "Clues",
    "Fact",
    "Failure",
    "Frame",
    "Holder",
    "Incident",
    "Line",
    "Measured",
    "OomMessage",
    "Point",
    "RankBudget",
    "RankMemory",
    "Scalar",
    "SglangBudget",
    "StatsSummary",
    "Timeline",
    "Verdict",
    "VersionGuess",
    "VllmBudget",
    "Window",
    "number",
]
