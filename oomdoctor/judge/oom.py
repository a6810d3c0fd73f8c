"""What a failed GPU allocation's own numbers say, judged once per diagnosis.

Rules (through features) and advice read this judgement; neither does the arithmetic again.
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.budget.costs import message_foreign_explains
from oomdoctor.judge import holders
from oomdoctor.judge.records import Decision
from oomdoctor.knowledge.kinds import OOM_KINDS
from oomdoctor.model import Budget, Failure, Incident, OomMessage
from oomdoctor.units import size

#: An OOM with this much more free than requested was refused by something other than the GPU.
FREE_ROOM_GIB = 4.0
#: Memory held outside every listed process this large is a holder of its own (GiB).
HIDDEN_HOLDER_GIB = 2.0
#: The failing process holds the card when it holds all used memory but this much.
SELF_HOLDS_SLACK_GIB = 1.0


class OomJudgement(NamedTuple):
    message: OomMessage
    holders: holders.HolderView
    shortfall_gib: float | None  # requested − free (≥ 0)
    outside_gib: float  # foreign holders, plus hidden memory large enough to be a holder
    foreign_explains: bool  # those holders alone account for the shortfall
    exceeds_card: bool  # the single allocation is at least the card's capacity
    free_covers_request: bool  # far more was free than requested
    self_holds_card: bool  # the failing process holds nearly all used memory
    #: could the request ever fit: "never" (more than the card), "not_beside_weights" (more than
    #: the card minus the weights), "fits" or "unknown", with the arithmetic
    fit: Decision = Decision("unknown", "the message does not give the request and the card")


def _own_pid(incident: Incident, primary: Failure) -> int | None:
    """The PID of the process that printed the failure, where its line's prefix is the process's
    own (vLLM's `(Worker_TP0 pid=N)`); a Ray actor's prefix also covers the processes it spawned
    (SGLang's scheduler inside a verl WorkerDict), so it names no one for sure."""
    pid = primary.line.actor_pid
    return pid if pid is not None and incident.actor_roles.get(pid) == "engine" else None


def judge(
    incident: Incident,
    budget: Budget,
    primary: Failure | None,
    server_pids: frozenset[int] = frozenset(),
) -> OomJudgement | None:
    """The judgement of the diagnosed failure's OOM message (None: it is not a GPU OOM)."""
    if primary is None or primary.oom is None or primary.kind not in OOM_KINDS:
        return None
    oom = primary.oom
    tp = incident.server_args.get("tp_size")
    view = holders.judge(
        oom,
        holders.sibling_pids(incident),
        server_pids,
        tensor_parallel=(isinstance(tp, int) and tp > 1) or len(incident.ranks) > 1,
        own_pid=_own_pid(incident, primary),
    )
    requested, free, total = oom.requested_gib, oom.free_gib, oom.total_gib
    shortfall = max(requested - free, 0.0) if requested is not None and free is not None else None
    hidden = view.hidden_gib or 0.0
    outside = view.foreign_gib + (hidden if hidden >= HIDDEN_HOLDER_GIB else 0.0)
    # Free memory the size of the request is common in real OOMs (PyTorch reads it after releasing
    # its cache, another process's use moves): only far more than asked says the GPU had room.
    roomy = (
        requested is not None
        and free is not None
        and oom.allowed_gib is None  # a per-process cap is a limit of its own
        and free >= max(2 * requested, requested + FREE_ROOM_GIB)
    )
    used = total - free if total is not None and free is not None else None
    return OomJudgement(
        message=oom,
        holders=view,
        shortfall_gib=shortfall,
        outside_gib=outside,
        foreign_explains=message_foreign_explains(outside, shortfall, budget, total),
        exceeds_card=requested is not None and total is not None and requested >= total,
        free_covers_request=roomy,
        self_holds_card=(
            view.self_gib is not None
            and used is not None
            and view.self_gib >= used - SELF_HOLDS_SLACK_GIB
        ),
        fit=_fit(requested, total, budget.weights_gib, primary),
    )


def _fit(
    requested: float | None, total: float | None, weights: float | None, primary: Failure
) -> Decision:
    """Whether the failed allocation could fit on this card at any setting of the fraction."""
    if requested is None or total is None:
        return Decision("unknown", "the message does not give the request and the card")
    if requested >= total:
        return Decision(
            "never",
            f"{size(requested)} requested ≥ the whole {size(total)} card: no setting fits it",
            primary.line,
            1.0,
        )
    if weights is not None and primary.site not in ("weights", "kv_pool"):
        room = total - weights
        if requested >= room:
            return Decision(
                "not_beside_weights",
                f"{size(requested)} requested ≥ the card {size(total)} minus the weights "
                f"{size(weights)} = {size(room)}: no fraction fits it beside the weights",
                primary.line,
                1.0,
            )
        return Decision(
            "fits",
            f"{size(requested)} requested < the card {size(total)} minus the weights "
            f"{size(weights)} = {size(room)}",
            primary.line,
            0.8,
        )
    return Decision(
        "fits", f"{size(requested)} requested < the whole {size(total)} card", primary.line, 0.6
    )
