"""Who held the GPU when the allocation failed, judged from the OOM message itself.

The trap (DESIGN §3): inside a container NVML reports host PIDs, so PyTorch prints the failing
server as ``Process N`` and the ``this process`` clause is missing. A lone ``Process N`` whose size
matches what PyTorch reserved (plus the usual non-PyTorch overhead) is the server itself.

The other way round, memory can be held by nobody the message lists: ``this process has 0 bytes``
(NVML looked in another PID namespace), no process clauses at all (no NVML in the container, the
old 1.x form, Ascend's NPU form). Then this process is what PyTorch allocated and reserved, and
what is used beyond that and a non-PyTorch allowance is a holder the message cannot name.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from oomdoctor.model import Holder, Incident, OomMessage

#: Why "this process" is the server: the message's own clause says so.
OWN_CLAUSE = "PyTorch's own clause"
#: Non-PyTorch memory of a serving process: CUDA context, NCCL/cuBLAS workspaces, graphs (GiB).
MAX_NON_PYTORCH_GIB = 6.0
#: A holder this small on a TP server is usually a peer rank's CUDA context, not a co-tenant.
PEER_CONTEXT_GIB = 1.5
#: What a report or the advice lists of holders, ranks or processes: the TOP largest, and a
#: count (and total size) for the rest, however many the log or the snapshot names.
TOP = 8

T = TypeVar("T")


class Shown(NamedTuple):
    """What a report lists of a long sequence: the indices it keeps, and the rest counted."""

    kept: tuple[int, ...]  # indices into the sequence, in its order
    more: int  # how many are left out
    more_gib: float  # their total size


def top(
    items: Sequence[T],
    size: Callable[[T], float | None],
    n: int = TOP,
    always: Callable[[T], bool] | None = None,
) -> Shown:
    """The ``n`` largest of ``items`` by ``size`` (those ``always`` holds for come first and
    count against ``n`` only while room is left), in their original order; the rest counted.
    O(len × log n): a snapshot of 300k processes or a message naming 25k stays cheap."""
    if len(items) <= n:
        return Shown(tuple(range(len(items))), 0, 0.0)
    must = [i for i, x in enumerate(items) if always is not None and always(x)][:n]
    taken = set(must)
    rest = heapq.nlargest(
        n - len(must),
        (i for i in range(len(items)) if i not in taken),
        key=lambda i: size(items[i]) or 0.0,
    )
    kept = sorted(taken.union(rest))
    keep = set(kept)
    more_gib = sum(size(x) or 0.0 for i, x in enumerate(items) if i not in keep)
    return Shown(tuple(kept), len(items) - len(kept), more_gib)


def non_pytorch_allowance(total_gib: float | None) -> float:
    """How much of a card a process's own non-PyTorch memory (context, NCCL, cuBLAS) can take
    when the message does not say: a tenth of the card, between 1.5 and MAX_NON_PYTORCH_GIB."""
    if total_gib is None:
        return MAX_NON_PYTORCH_GIB
    return min(max(0.1 * total_gib, 1.5), MAX_NON_PYTORCH_GIB)


class HolderView(NamedTuple):
    holders: tuple[Holder, ...]
    self_gib: float | None
    foreign_gib: float
    sibling_gib: float
    unattributed_gib: float | None  # total − free − everything listed
    #: what no listed process (and not this process's own non-PyTorch memory) can hold
    hidden_gib: float | None = None
    self_estimated: bool = False  # this process's size is PyTorch's, not NVML's


def judge(
    oom: OomMessage,
    siblings: Mapping[int, str],
    server_pids: frozenset[int] = frozenset(),
    tensor_parallel: bool = False,
    own_pid: int | None = None,
) -> HolderView:
    """Label every holder in an OOM message as self, sibling stage, peer rank or foreign."""
    holders: list[Holder] = []
    torch_side = _torch_side(oom)
    estimated = False
    if oom.this_process_gib is not None:
        if torch_side is not None and oom.this_process_gib + 0.01 < torch_side:
            holders.append(
                Holder(
                    None,
                    torch_side,
                    "self",
                    f"PyTorch's allocated + reserved memory: NVML saw only "
                    f"{oom.this_process_gib:.2f} GiB for this process (another PID namespace)",
                )
            )
            estimated = True
        else:
            holders.append(Holder(None, oom.this_process_gib, "self", OWN_CLAUSE))
    self_pid, self_why = _self_match(oom, own_pid) if oom.this_process_gib is None else (None, "")
    for pid, gib in oom.processes:
        if pid == self_pid:
            holders.append(Holder(pid, gib, "self", self_why))
        elif pid in siblings:
            holders.append(
                Holder(pid, gib, "sibling", f"the {siblings[pid]} stage of the same pipeline")
            )
        elif pid in server_pids:
            holders.append(Holder(pid, gib, "peer", "a process of this server named in the log"))
        elif tensor_parallel and gib < PEER_CONTEXT_GIB:
            holders.append(
                Holder(pid, gib, "peer", "small enough to be a peer rank's CUDA context")
            )
        else:
            holders.append(Holder(pid, gib, "foreign", "another process on the same GPU"))
    if not any(h.role == "self" for h in holders) and torch_side is not None:
        # No NVML clause names this process: its allocator's pools are what it surely holds.
        why = "what PyTorch allocated and reserved (the message names no process as this one)"
        holders.append(Holder(None, torch_side, "self", why))
        estimated = True
    self_gib = next((h.gib for h in holders if h.role == "self"), None)
    foreign = sum(h.gib for h in holders if h.role == "foreign")
    sibling = sum(h.gib for h in holders if h.role == "sibling")
    unattributed = hidden = None
    if oom.total_gib is not None and oom.free_gib is not None and holders:
        listed = sum(h.gib for h in holders)
        unattributed = max(oom.total_gib - oom.free_gib - listed, 0.0)
        allowance = non_pytorch_allowance(oom.total_gib) if estimated else 0.0
        hidden = max(unattributed - allowance, 0.0)
    return HolderView(tuple(holders), self_gib, foreign, sibling, unattributed, hidden, estimated)


def _torch_side(oom: OomMessage) -> float | None:
    """What this process's PyTorch allocator holds: allocated + reserved-unallocated (modern),
    or reserved in total (1.x / NPU)."""
    if oom.reserved_total_gib is not None:
        return oom.reserved_total_gib
    if oom.allocated_gib is not None:
        return oom.allocated_gib + (oom.reserved_unallocated_gib or 0.0)
    return None


def _self_match(oom: OomMessage, own_pid: int | None = None) -> tuple[int | None, str]:
    """The PID among ``Process N`` clauses that is the failing process itself, and why.

    Inside a container NVML reports host PIDs, so PyTorch prints the failing process as a
    ``Process N`` too. It holds at least what its allocator holds (allocated + reserved), and
    used memory is the sum of the holders: when the memory no clause accounts for is less than
    that, the process must be one of the listed ones, and only the holders at least that large
    can be it."""
    if not oom.processes:
        return None, ""
    for pid, _ in oom.processes:
        if own_pid is not None and pid == own_pid:
            return pid, f"the failing line's own prefix names PID {pid}"
    torch_side = _torch_side(oom)
    used = (
        oom.total_gib - oom.free_gib
        if oom.total_gib is not None and oom.free_gib is not None
        else None
    )
    if torch_side is None:
        if len(oom.processes) == 1 and used is not None:
            # Truncated message: a single holder that accounts for all used memory is the server.
            pid, gib = oom.processes[0]
            if abs(used - gib) <= 1.5:
                return pid, (
                    f"the only holder, and it holds all the used memory ({gib:.2f} of "
                    f"{used:.2f} GiB used)"
                )
        return None, ""
    large = [(pid, gib) for pid, gib in oom.processes if gib >= torch_side - 0.05]
    unlisted = used - sum(g for _, g in oom.processes) if used is not None else None
    if len(large) == 1 and unlisted is not None and unlisted < torch_side - 0.05:
        pid, gib = large[0]
        return pid, (
            f"this process holds at least the {torch_side:.2f} GiB its allocator holds, and only "
            f"{max(unlisted, 0.0):.2f} GiB of the {used:.2f} GiB used is outside the listed "
            f"processes: it must be one of them, and only PID {pid} ({gib:.2f} GiB) is that large"
        )
    best: tuple[float, int] | None = None
    for pid, gib in large:
        overhead = gib - torch_side
        if overhead <= max(MAX_NON_PYTORCH_GIB, 0.1 * gib) and (best is None or overhead < best[0]):
            best = (overhead, pid)
    if best is not None:
        return best[1], (
            f"its size matches what this process's allocator holds ({torch_side:.2f} GiB plus "
            f"{best[0]:.2f} GiB of CUDA context and workspaces): the container's view of itself"
        )
    return None, ""


def sibling_pids(incident: Incident) -> dict[int, str]:
    """PIDs the log names as the server's own processes: Omni stages in stage lines, and the
    engine processes of `(Name pid=N)` prefixes (vLLM workers, engine cores, stage engines).
    An RL trainer's actor prefix (verl's WorkerDict) is not one: it holds memory of its own."""
    out: dict[int, str] = {
        pid: "engine process named in the log's own lines"
        for pid, role in incident.actor_roles.items()
        if role == "engine"
    }
    for fact in incident.facts_of("omni_stage_group"):
        for pid in re.findall(r"\d+", fact.text("pids") or str(fact.data.get("pids", ""))):
            out[int(pid)] = fact.text("stage") or "stage"
    for fact in incident.facts_of("omni_stage"):
        pid = fact.num("pid")
        if pid is not None:
            out[int(pid)] = fact.text("stage") or "stage"
    return out
