"""The one record a diagnosis hands to the reporters: the verdict, the actions and everything
they were decided from (report/build.py turns it into the report of DESIGN §5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.model import Action, Budget, Incident, Scalar, Verdict
from oomdoctor.rules.schema import Finding

if TYPE_CHECKING:  # loaded only when there is GPU state or an OOM to judge
    from oomdoctor.gpu.view import GpuView
    from oomdoctor.judge.oom import OomJudgement
    from oomdoctor.judge.records import Decision


class Diagnosis(NamedTuple):
    """The whole result handed to a reporter."""

    verdict: Verdict
    actions: tuple[Action, ...]
    findings: tuple[Finding, ...]
    budget: Budget
    incident: Incident
    notices: tuple[str, ...]
    gpu: GpuView | None = None  # None: not asked for (--no-gpu)
    capture: Mapping[str, Scalar] | None = None  # live runs: when the crash and snapshot happened
    oom: OomJudgement | None = None  # the failed allocation's numbers, judged (judge.oom)
    phase: Decision | None = None  # when the diagnosed failure happened, and what decided it
    site: Decision | None = None  # where it happened, and what decided it
    phase_rival: Decision | None = None  # a weaker source that says another phase
