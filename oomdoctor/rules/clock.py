"""One time budget for every user pattern of a run: rule ``[[patterns]]`` and the actor regexes
of a user's ``engine-markers.toml`` together.

A budget per pattern let thirty slow rules take thirty budgets (61 s), and actor regexes ran
with no timeout at all (exponential in the name's length). Here every match runs with the
``regex`` module's timeout, never longer than what is left of the run's budget, and the time is
charged to one clock; when it runs out, every user pattern is off for the rest of the run and
the report says so once.
"""

from __future__ import annotations

#: Seconds one user pattern may spend on one line (a catastrophic line is cut off here).
PATTERN_TIMEOUT = 0.05
#: Seconds all user patterns of one run may spend together, on every line. Far above what sane
#: patterns need on a 1 GB log (each runs only on the lines that hold its anchor).
USER_BUDGET = 2.0
#: The shortest timeout handed to the regex module (it needs a positive one).
_MIN_TIMEOUT = 1e-4


class PatternClock:
    """The time user patterns have spent in one run. (A plain class: defining a dataclass costs
    a fraction of every start.)"""

    __slots__ = ("budget", "by", "spent", "stopped", "timed_out")

    def __init__(self, budget: float = USER_BUDGET) -> None:
        self.budget = budget
        self.spent = 0.0
        self.by: dict[str, float] = {}  # what (a rule pattern, an actor regex) → seconds
        #: where the budget ran out (``line N`` or a process name), once it has
        self.stopped: str | None = None
        #: the user patterns cut off by the per-line timeout: what → where
        self.timed_out: dict[str, str] = {}

    @property
    def exhausted(self) -> bool:
        return self.stopped is not None

    def timeout(self) -> float:
        """The timeout for the next match: the per-line one, or what is left if that is less."""
        return max(min(PATTERN_TIMEOUT, self.budget - self.spent), _MIN_TIMEOUT)

    def charge(self, seconds: float, where: str, what: str = "") -> None:
        self.spent += seconds
        self.by[what] = self.by.get(what, 0.0) + seconds
        if self.stopped is None and self.spent >= self.budget:
            self.stopped = where

    def costliest(self) -> str:
        return max(self.by, key=self.by.__getitem__) if self.by else ""

    def notices(self, names: dict[str, str] | None = None) -> list[str]:
        """What the report says: the budget that ran out (naming what cost most: ``names`` says
        how to show it), and actor regexes cut off by the timeout."""
        out = [
            f"the engine-marker actor regex {what} timed out on {where}; it was not counted there"
            for what, where in self.timed_out.items()
        ]
        if self.stopped is not None:
            worst = self.costliest()
            shown = (names or {}).get(worst, worst)
            out.append(
                "user rule patterns and engine-marker actor regexes were turned off for the rest "
                f"of this run: together they used up their {self.budget:g} s time budget (at "
                f"{self.stopped}"
                + (f"; the costliest: {shown}, {self.by[worst]:.2f} s" if worst else "")
                + "); findings of user rules may be missing"
            )
        return out
