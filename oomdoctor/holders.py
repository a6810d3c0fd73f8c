"""Who held the GPU when the allocation failed, judged from the OOM message itself.

The trap (DESIGN §3): inside a container NVML reports host PIDs, so PyTorch prints the failing
server as ``Process N`` and the ``this process`` clause is missing. A lone ``Process N`` whose size
matches what PyTorch reserved (plus the usual non-PyTorch overhead) is the server itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oomdoctor.model import Holder, OomMessage

#: Non-PyTorch memory of a serving process: CUDA context, NCCL/cuBLAS workspaces, graphs (GiB).
MAX_NON_PYTORCH_GIB = 6.0
#: A holder this small on a TP server is usually a peer rank's context, not a co-tenant.
PEER_CONTEXT_GIB = 1.5


class HolderView(NamedTuple):
    holders: tuple[Holder, ...]
    self_gib: float | None
    foreign_gib: float
    sibling_gib: float
    unattributed_gib: float | None  # total − free − everything listed


def judge(
    oom: OomMessage,
    siblings: Mapping[int, str],
    server_pids: frozenset[int] = frozenset(),
    tensor_parallel: bool = False,
) -> HolderView:
    """Label every holder in an OOM message as self, sibling stage, peer rank or foreign."""
    holders: list[Holder] = []
    if oom.this_process_gib is not None:
        holders.append(Holder(None, oom.this_process_gib, "self", "PyTorch's own clause"))
    self_pid = _self_match(oom) if oom.this_process_gib is None else None
    for pid, gib in oom.processes:
        if pid in siblings:
            holders.append(
                Holder(pid, gib, "sibling", f"the {siblings[pid]} stage of the same pipeline")
            )
        elif pid == self_pid:
            holders.append(
                Holder(
                    pid, gib, "self", "its size matches PyTorch's reserved memory (container PID)"
                )
            )
        elif pid in server_pids:
            holders.append(Holder(pid, gib, "peer", "a process of this server named in the log"))
        elif tensor_parallel and gib < PEER_CONTEXT_GIB:
            holders.append(
                Holder(pid, gib, "peer", "small enough to be a peer rank's CUDA context")
            )
        else:
            holders.append(Holder(pid, gib, "foreign", "another process on the same GPU"))
    self_gib = next((h.gib for h in holders if h.role == "self"), None)
    foreign = sum(h.gib for h in holders if h.role == "foreign")
    sibling = sum(h.gib for h in holders if h.role == "sibling")
    unattributed = None
    if oom.total_gib is not None and oom.free_gib is not None and holders:
        listed = sum(h.gib for h in holders)
        unattributed = max(oom.total_gib - oom.free_gib - listed, 0.0)
    return HolderView(tuple(holders), self_gib, foreign, sibling, unattributed)


def _self_match(oom: OomMessage) -> int | None:
    """The PID among ``Process N`` clauses that is the failing process itself, if one fits."""
    if not oom.processes:
        return None
    reserved = None
    if oom.allocated_gib is not None:
        reserved = oom.allocated_gib + (oom.reserved_unallocated_gib or 0.0)
    best: tuple[float, int] | None = None
    for pid, gib in oom.processes:
        if reserved is None:
            continue
        overhead = gib - reserved
        fits = -0.05 <= overhead <= max(MAX_NON_PYTORCH_GIB, 0.1 * gib)
        if fits and (best is None or overhead < best[0]):
            best = (overhead, pid)
    if best is not None:
        return best[1]
    if reserved is None and len(oom.processes) == 1 and oom.total_gib and oom.free_gib is not None:
        # Truncated message: a single holder that accounts for all used memory is the server.
        pid, gib = oom.processes[0]
        if abs(oom.total_gib - oom.free_gib - gib) <= 1.5:
            return pid
    return None
