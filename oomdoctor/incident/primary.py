"""Which failure of an incident is diagnosed: the first of the best tier the log has.

A memory failure explains the others; a named or plain error is a cause; a traceback cut before
its exception says less; an allocator retry is a warning; a consequence only says that a failure
happened elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from oomdoctor.knowledge.kinds import CONSEQUENCE_KINDS, MEMORY_KINDS, RETRY_KINDS
from oomdoctor.model import Failure

TIERS: tuple[Callable[[str], bool], ...] = (
    lambda kind: kind in MEMORY_KINDS,
    lambda kind: kind not in CONSEQUENCE_KINDS | RETRY_KINDS | {"cut_traceback"},
    lambda kind: kind == "cut_traceback",
    lambda kind: kind in RETRY_KINDS,
    lambda kind: True,
)


def primary_failure(failures: Iterable[Failure]) -> Failure | None:
    """The failure to diagnose, from failures in log order (see TIERS)."""
    listed = tuple(failures)
    for tier in TIERS:
        for failure in listed:
            if tier(failure.kind):
                return failure
    return None
