"""What oomdoctor concludes: the verdict and the actions.

No ``from __future__ import annotations`` here: typing.NamedTuple compiles every field annotation
given as a string (a ForwardRef), which made defining these records take twice as long.
"""

from collections.abc import Mapping
from typing import Literal, NamedTuple

from oomdoctor.model.log import EMPTY, Scalar


class Action(NamedTuple):
    """One thing to change; flag actions carry the current and the computed value."""

    text: str
    flag: str | None = None
    direction: Literal["raise", "lower", "set"] | None = None
    value: Scalar = None
    current: Scalar = None
    basis: str | None = None  # the arithmetic behind the value, shown in reports
    #: an "Or ..." instead of the actions before it: its flags are not part of the change
    alternative: bool = False


class Alternative(NamedTuple):
    """The category the log cannot rule out, how likely it is, and what would settle it."""

    category: str
    confidence: float
    question: str


class Verdict(NamedTuple):
    category: str
    confidence: float
    summary: str
    rule: str | None = None
    explanation: Mapping[str, str] = EMPTY  # what/why/remedy from the rule
    #: when the log cannot decide: the runner-up (at most one) and the question that settles it
    alternatives: tuple[Alternative, ...] = ()
    #: the rule file, when the deciding rule came from --rules (None: a shipped rule)
    rule_source: str | None = None
