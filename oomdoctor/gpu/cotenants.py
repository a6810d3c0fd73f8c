"""Who else holds the server's GPUs, and what it cost: the snapshot read against the log.

- Which processes are the server: by evidence, never by name alone (gpu/identify.py): PIDs the
  log names and their children, or a server-like title that the size the log accounts to this
  process, a rank the log printed or the launch's start time agrees with. A title alone makes a
  holder "possibly another server": a co-tenant.
- Which GPUs the server used: those of its own processes in the snapshot, else TP rank → CUDA
  ordinal (`base_gpu_id`, `gpu_id_step`) → `CUDA_VISIBLE_DEVICES` → device (by UUID where it
  names UUIDs), else those of server-named processes.
- Each process on those GPUs is the server, a sibling stage (Omni), or a co-tenant. A PID from
  another namespace has no name; if its size matches what the server holds, it is the server.
- A co-tenant present from the start shrank `pre` (capacity − pre − context overhead covers it);
  one that grew later took memory the server had counted on. Its KV cost is y × its size.
"""

from __future__ import annotations

from collections.abc import Mapping

from oomdoctor.budget import costs
from oomdoctor.extract.normalise import rank_numbers
from oomdoctor.gpu.identify import identify, named_like_server, parse_time
from oomdoctor.gpu.snapshot import GIB, Device, Process, Snapshot
from oomdoctor.gpu.view import GpuHolder, GpuView
from oomdoctor.judge import holders
from oomdoctor.model import Budget, Failure, Incident

#: A snapshot this far from the log's last line may show a different set of holders.
STALE_AFTER_S = 15 * 60


def _server_pids(incident: Incident) -> dict[int, str]:
    pids: dict[int, str] = {}
    for fact in incident.facts_of("child_died"):
        pid = fact.num("pid")
        if pid is not None:
            pids[int(pid)] = f"a child's crash line, line {fact.line.number}"
    return pids


def _ordinals(incident: Incident) -> dict[int, str]:
    """CUDA ordinal → rank label, from the ranks that printed lines and server_args."""
    args = incident.server_args
    base = args.get("base_gpu_id")
    step = args.get("gpu_id_step")
    base = base if isinstance(base, int) else 0
    step = step if isinstance(step, int) and step > 0 else 1
    tp = incident.tp_size or 1
    dp_size = args.get("dp_size")
    replicas = (
        isinstance(dp_size, int) and dp_size > 1 and args.get("enable_dp_attention") is not True
    )
    labels = {r.rank for r in incident.ranks} | {r for f in incident.failures for r in f.ranks}
    out: dict[int, str] = {}
    for label in labels:
        nums = rank_numbers(label)
        if "TP" not in nums:
            continue
        local = nums["TP"]  # with DP attention the TP index is already global
        if replicas and nums.get("DP", -1) >= 0:
            local += nums["DP"] * tp  # data-parallel replicas sit side by side
        out[base + local * step] = label
    if not out and incident.ranks:
        out[base] = incident.ranks[0].rank
    return out


def _device_for_ordinal(snap: Snapshot, ordinal: int, visible: list[str] | None) -> Device | None:
    if visible is not None:
        if ordinal >= len(visible):
            return None
        token = visible[ordinal]
        if token.startswith(("GPU-", "MIG-")):
            return next((d for d in snap.devices if d.uuid and d.uuid.startswith(token)), None)
        if not token.isdigit():
            return None
        ordinal = int(token)
    return next((d for d in snap.devices if d.index == ordinal), None)


def _gib(p: Process) -> float | None:
    return None if p.used_bytes is None else p.used_bytes / GIB


def _message_self(
    primary: Failure | None, siblings: Mapping[int, str]
) -> tuple[int | None, float | None]:
    """The failing process as the OOM message shows it: its PID (container trap) and size."""
    oom = primary.oom if primary else None
    if oom is None:
        return None, None
    me = next((h for h in holders.judge(oom, siblings).holders if h.role == "self"), None)
    return (me.pid, me.gib) if me is not None else (None, None)


def analyse(
    snap: Snapshot,
    incident: Incident,
    budget: Budget,
    primary: Failure | None,
    siblings: Mapping[int, str],
    cuda_visible_devices: str | None = None,
) -> GpuView:
    notes: list[str] = []
    visible_spec = cuda_visible_devices or snap.cuda_visible_devices
    visible = [t.strip() for t in visible_spec.split(",") if t.strip()] if visible_spec else None
    known = _server_pids(incident)
    self_pid, self_gib = _message_self(primary, siblings)
    if self_pid is not None:  # the OOM message's own process, printed under its host PID
        known[self_pid] = "the OOM message's own process"
    for pid in siblings:
        known.setdefault(pid, "a process of this server's own lines")
    expected = costs.expected_server_gib(budget, self_gib)
    ordinals = _ordinals(incident)
    rank_devices: dict[int, Device] = {}
    for ordinal, label in ordinals.items():
        dev = _device_for_ordinal(snap, ordinal, visible)
        tp = rank_numbers(label).get("TP")
        if dev is not None and tp is not None:
            rank_devices[tp] = dev
    launch = incident.server_args_line.ts if incident.server_args_line is not None else None
    gap_s = _gap(snap.time, incident.last_ts)
    ident = identify(
        snap,
        known,
        lambda gib: costs.matches_server(gib, expected),
        rank_devices,
        launch,
        after_log=gap_s is not None and gap_s > 0,
    )

    def is_server(p: Process) -> bool:
        return p.pid in ident.server

    server_devs: list[Device] = []
    for p in snap.processes:
        dev = snap.device_of(p)
        if dev is not None and is_server(p) and dev not in server_devs:
            server_devs.append(dev)
    mapping = "the server's own processes in the snapshot" if server_devs else None
    if not server_devs and ordinals:
        for ordinal in sorted(ordinals):
            dev = _device_for_ordinal(snap, ordinal, visible)
            if dev is not None and dev not in server_devs:
                server_devs.append(dev)
        if server_devs:
            mapping = "TP ranks → CUDA ordinals " + (
                f"→ CUDA_VISIBLE_DEVICES={visible_spec}"
                if visible
                else "(= NVML index: CUDA_VISIBLE_DEVICES unknown)"
            )
    if not server_devs:
        for p in snap.processes:
            dev = snap.device_of(p)
            if dev is not None and named_like_server(p) and dev not in server_devs:
                server_devs.append(dev)
        if server_devs:
            mapping = "processes named like this engine's (nothing else ties them to the log)"
    if not server_devs and len(snap.devices) == 1:
        server_devs = [snap.devices[0]]
        mapping = "the only GPU in the snapshot"
    if not server_devs and not snap.devices and snap.processes:
        mapping = "no device table in the snapshot: every process is listed"
    elif not server_devs:
        server_devs = list(snap.devices)
        mapping = "unknown: every GPU in the snapshot is listed"
        notes.append("could not tell which GPUs the server used; all GPUs are listed")

    failing = _failing_device(snap, primary, visible, server_devs)
    holders: list[GpuHolder] = []
    for p in snap.processes:
        dev = snap.device_of(p)
        if server_devs and dev is not None and dev not in server_devs:
            continue
        gib = _gib(p)
        role, why = _role(p, gib, ident.server.get(p.pid), siblings, expected)
        if role == "foreign" and p.pid in ident.other_server:
            why = ident.other_server[p.pid]
        foreign = role == "foreign"
        total = dev.total_bytes / GIB if dev is not None and dev.total_bytes else None
        at_start = costs.present_at_start(total, gib, budget) if foreign else None
        cost = costs.kv_cost(gib, budget) if foreign else None
        holders.append(GpuHolder(p.pid, dev, gib, p.name, role, why, cost, at_start))

    unattributed: list[tuple[Device, float]] = []
    for dev in server_devs:
        if dev.used_bytes is None:
            continue
        listed = [p.used_bytes for p in snap.processes if snap.device_of(p) is dev]
        if any(u is None for u in listed):
            continue  # MIG/WDDM: per-process sizes unknown, the gap means nothing
        gap = (dev.used_bytes - sum(u for u in listed if u is not None)) / GIB
        if gap > 1.0:
            unattributed.append((dev, gap))
    if gap_s is not None and abs(gap_s) > STALE_AFTER_S:
        when = "after" if gap_s > 0 else "before"
        notes.append(
            f"the snapshot was taken {abs(gap_s) / 60:.0f} min {when} the log's last line: "
            "the holders it shows may have come or gone since"
        )
    on_failing = [
        (h.gib, h.present_at_start)
        for h in holders
        if h.role == "foreign" and h.gib is not None and (failing is None or h.device is failing)
    ]
    with_size = [d for d in (failing, *server_devs) if d is not None and d.total_bytes]
    return GpuView(
        snapshot=snap,
        foreign_explains=costs.snapshot_foreign_explains(on_failing, budget, primary),
        capacity_gib=with_size[0].total_bytes / GIB
        if with_size and with_size[0].total_bytes
        else None,
        unavailable=None,
        server_devices=tuple(server_devs),
        failing_device=failing,
        holders=tuple(holders),
        unattributed=tuple(unattributed),
        mapping=mapping,
        gap_s=gap_s,
        notes=tuple(notes + list(snap.notes)),
    )


def _role(
    p: Process,
    gib: float | None,
    server: str | None,
    siblings: Mapping[int, str],
    expected: float | None,
) -> tuple[str, str]:
    if p.pid in siblings:
        return "sibling", f"the {siblings[p.pid]} stage of the same pipeline"
    if server is not None:
        return "server", f"this server: {server}"
    if not p.name and not p.cmdline and p.visible is not True:
        if costs.matches_server(gib, expected):
            return (
                "server",
                "not visible from the snapshot's namespace, but its size matches the server's",
            )
        return "foreign", "a process in another PID namespace (no name visible)"
    return "foreign", "another process on the server's GPU"


def _failing_device(
    snap: Snapshot, primary: Failure | None, visible: list[str] | None, server: list[Device]
) -> Device | None:
    if primary is not None and primary.oom is not None and primary.oom.gpu is not None:
        dev = _device_for_ordinal(snap, primary.oom.gpu, visible)
        if dev is not None and (not server or dev in server):
            return dev
    return server[0] if len(server) == 1 else None


def _gap(snap_time: str | None, log_time: str | None) -> float | None:
    """Seconds from the log's last line to the snapshot, both read as the GPU host's local time."""
    a, b = parse_time(log_time), parse_time(snap_time)
    if a is None or b is None:
        return None
    return (b - a).total_seconds()
