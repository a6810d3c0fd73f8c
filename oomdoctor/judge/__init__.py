"""The judgement stage: from what the log says (the Incident) to what it means.

Every judgement that rules and reports read is made here, once, with the line and the arithmetic
that decided it:

- where and when each failure happened (place.py: site, phase);
- the memory budget is built between the two steps (oomdoctor/budget: pure arithmetic);
- who held the card when an allocation failed, and whether it could ever have fit (oom.py,
  holders.py; the GPU snapshot read against the log in gpu/cotenants.py).

Rules (through rules/features.py), advice and reports read only the Judgement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from oomdoctor import budget as budgets
from oomdoctor.incident.primary import primary_failure
from oomdoctor.judge import holders, oom
from oomdoctor.judge.place import Placement, place
from oomdoctor.judge.records import Decision
from oomdoctor.knowledge import Knowledge, builtin
from oomdoctor.model import Budget, Failure, Incident

if TYPE_CHECKING:  # loaded when used: GPU state
    from oomdoctor.gpu.snapshot import Snapshot
    from oomdoctor.gpu.view import GpuView, Unavailable
    from oomdoctor.judge.oom import OomJudgement

GpuState: TypeAlias = "Snapshot | Unavailable | None"


class Judgement(NamedTuple):
    """What the incident means: its failures placed, the budget, the GPU state read against
    them, and the failed allocation's own numbers judged."""

    incident: Incident  # failures with their site and phase decided
    budget: Budget
    gpu: GpuView | None
    oom: OomJudgement | None
    site: Decision | None = None  # the diagnosed failure's, with what decided it
    phase: Decision | None = None
    phase_rival: Decision | None = None  # a weaker source that says another phase


def placed(
    incident: Incident, knowledge: Knowledge | None = None
) -> tuple[Incident, Placement | None]:
    """The incident with every failure's site and phase decided, and the diagnosed one's
    placement (its Decisions)."""
    table = knowledge or builtin()
    done: list[Failure] = []
    primary: Placement | None = None
    for failure in incident.failures:
        p = place(
            failure, table, incident.server_args, incident.engine, incident.stack, incident.ready
        )
        done.append(failure._replace(site=p.site.value, phase=p.phase.value, site_frame=p.frame))
        if failure is incident.primary:
            primary = p
    frozen = tuple(done)
    return incident._replace(failures=frozen, primary=primary_failure(frozen)), primary


def judge(
    incident: Incident,
    gpu: GpuState = None,
    cuda_visible_devices: str | None = None,
    knowledge: Knowledge | None = None,
) -> Judgement:
    incident, placement = placed(incident, knowledge)
    primary = incident.primary
    bud = budgets.build(incident, primary, _capacity(gpu))
    view = _gpu_view(incident, bud, primary, gpu, cuda_visible_devices)
    server = view.server_pids if view is not None else frozenset()
    return Judgement(
        incident,
        bud,
        view,
        oom.judge(incident, bud, primary, server),
        placement.site if placement else None,
        placement.phase if placement else None,
        placement.phase_rival if placement else None,
    )


def _capacity(gpu: GpuState) -> float | None:
    """The GPUs' total memory from a snapshot, for logs that do not print it."""
    total = getattr(gpu, "cuda_total_gib", None)  # a Snapshot (no import for the others)
    return total() if callable(total) else None


def _gpu_view(
    incident: Incident,
    bud: Budget,
    primary: Failure | None,
    gpu: GpuState,
    cuda_visible_devices: str | None,
) -> GpuView | None:
    from oomdoctor.gpu import view

    if gpu is None:
        return None
    if isinstance(gpu, view.Unavailable):
        return view.unavailable(gpu)
    from oomdoctor.gpu import cotenants  # a snapshot to read: the attribution logic loads now

    siblings = holders.sibling_pids(incident)
    return cotenants.analyse(gpu, incident, bud, primary, siblings, cuda_visible_devices)
