"""What reports and rules see of the GPU: the server's devices and who else holds them, or why
there is no GPU state at all. Kept apart from the snapshot readers and the attribution logic, so
that a run without GPU state (``--no-gpu``) loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from oomdoctor.gpu.snapshot import Device, Snapshot


class Unavailable(NamedTuple):
    """Why no snapshot could be taken or loaded (a value, not an exception)."""

    reason: str
    hint: str | None = None
    details: tuple[str, ...] = ()


class GpuHolder(NamedTuple):
    pid: int
    device: Device | None
    gib: float | None  # None: the driver does not say (MIG)
    name: str | None  # None: not visible from where the snapshot was taken
    role: str  # "server", "sibling", "foreign"
    why: str
    kv_cost_gib: float | None = None
    present_at_start: bool | None = None


class GpuView(NamedTuple):
    snapshot: Snapshot | None
    unavailable: Unavailable | None
    server_devices: tuple[Device, ...] = ()
    failing_device: Device | None = None
    holders: tuple[GpuHolder, ...] = ()
    unattributed: tuple[tuple[Device, float], ...] = ()  # (device, GiB no process accounts for)
    mapping: str | None = None  # how the server's GPUs were found
    gap_s: float | None = None  # snapshot time − the log's last timestamp
    notes: tuple[str, ...] = ()
    foreign_explains: bool = False  # the co-tenants on the failing GPU account for the failure
    capacity_gib: float | None = None  # the failing (else first server) GPU's total memory

    @property
    def foreign(self) -> tuple[GpuHolder, ...]:
        return tuple(h for h in self.holders if h.role == "foreign")

    @property
    def server_pids(self) -> frozenset[int]:
        """PIDs the snapshot shows as this server's own processes."""
        return frozenset(h.pid for h in self.holders if h.role == "server")


def unavailable(reason: Unavailable) -> GpuView:
    note = f"no GPU state: {reason.reason}" + (f" ({reason.hint})" if reason.hint else "")
    return GpuView(snapshot=None, unavailable=reason, notes=(note,))
