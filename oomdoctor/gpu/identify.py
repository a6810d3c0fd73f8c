"""Which processes of a snapshot are this server: by evidence, never by a name alone.

Any process can call itself `sglang::scheduler_TP0` (setproctitle) or mention `sglang.srt` in
its command line: a second server, a trainer that drives SGLang, a co-tenant that hides. So a
process is this server only for what ties it to the log:

- its PID is one the log prints (a child's crash line, a `(Name pid=N)` prefix, the OOM message's
  own process), or its parent chain in the snapshot reaches one of those or another process
  already shown to be the server (its ranks and children);
- or it is named like a server process and something else agrees, while no process with PID
  evidence already is the server on that GPU: its size is what the log accounts to this process
  (the OOM message's figure, else the budget), its rank title (`TP3`) is a rank the log printed on
  the GPU that rank maps to, or it started with the launch the log shows.

A name match alone makes a holder "possibly another server": a co-tenant, with its reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from oomdoctor.gpu.snapshot import GIB, Device, Process, Snapshot

#: What SGLang and vLLM processes are called (process titles, module paths, the CLI).
SERVER_NAME = re.compile(
    r"^sglang::|sglang\.launch_server|sglang/launch_server|sglang\.srt"
    r"|^VLLM::|vllm\.entrypoints|vllm serve|\bvllm/v1/engine"  # vLLM sets VLLM::EngineCore etc.
)
#: The tensor-parallel rank in a process title (`sglang::scheduler_TP3`, `VLLM::Worker_TP1`).
_TITLE_RANK = re.compile(r"TP(\d+)\b")
#: A process that started this long before the launch the log shows is not of that launch.
START_SLACK_S = 120.0
#: ... and one that started this long after it is no process of its start-up either.
START_WINDOW_S = 30 * 60.0
#: How far up a parent chain is followed.
MAX_DEPTH = 64


class Identity(NamedTuple):
    server: Mapping[int, str]  # PID → why it is this server
    other_server: Mapping[int, str]  # PID → why it is possibly another server (a name alone)


def lineage(pid: int, proc_root: Path = Path("/proc")) -> tuple[int | None, str | None]:
    """A live process's parent PID and start time (ISO 8601, local time) from /proc, for the
    snapshot; (None, None) where the PID is not visible from here."""
    try:
        stat = (proc_root / str(pid) / "stat").read_text("ascii", "replace")
        boot = next(
            float(line.split()[1])
            for line in (proc_root / "stat").read_text("ascii", "replace").splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError, IndexError):
        return None, None
    fields = stat[stat.rfind(")") + 2 :].split()  # after `pid (comm) `: state, ppid, ...
    try:
        ppid, ticks = int(fields[1]), int(fields[19])
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
        when = datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds")
    except (IndexError, ValueError, OSError, OverflowError):
        return None, None
    return ppid, when


def named_like_server(p: Process) -> bool:
    return bool(SERVER_NAME.search(f"{p.name or ''} {p.cmdline or ''}".strip()))


def parse_time(text: str | None) -> datetime | None:
    """A timestamp as logs and snapshots print it, read as naive local time."""
    if not text:
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.strip()).replace("Z", "+00:00")
    for fmt in (
        "%Y-%m-%dT%H:%M:%S%z",
        "%Y-%m-%dT%H:%M:%S.%f%z",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M:%S.%f",
        "%a %b %d %H:%M:%S %Y",
        "%Y-%m-%d %H:%M:%S.%f",
        "%Y-%m-%d %H:%M:%S",
        "%Y/%m/%d %H:%M:%S.%f",
    ):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=None)
        except ValueError:
            continue
    return None


def _title_rank(p: Process) -> int | None:
    title = p.name or (p.cmdline.split()[0] if p.cmdline else "")
    m = _TITLE_RANK.search(title)
    return int(m.group(1)) if m else None


def identify(
    snap: Snapshot,
    known: Mapping[int, str],
    size_matches: Callable[[float | None], bool],
    rank_devices: Mapping[int, Device],
    launch_ts: str | None,
    after_log: bool = False,
) -> Identity:
    """``known``: PIDs the log names, with where; ``size_matches``: whether a size is what the
    log accounts to this server's process; ``rank_devices``: TP rank → the device it maps to;
    ``launch_ts``: when the launch the log shows began (None: the log has no launch);
    ``after_log``: the snapshot was taken after the log's last line (a server named in it may
    be this one restarted, which held nothing when the log's failure happened)."""
    server: dict[int, str] = {}
    for p in snap.processes:
        if p.pid in known:
            server[p.pid] = f"PID {p.pid}, which the log names ({known[p.pid]})"
    _children(snap.processes, known, server)
    by_device: dict[int, set[int]] = {}  # id(device) → evidenced server PIDs on it
    for p in snap.processes:
        if p.pid in server:
            by_device.setdefault(id(snap.device_of(p)), set()).add(p.pid)
    launch = parse_time(launch_ts)
    other: dict[int, str] = {}
    claims: dict[tuple[int, int | None], list[tuple[float, Process, str]]] = {}
    for p in snap.processes:
        if p.pid in server or not named_like_server(p):
            continue
        dev = snap.device_of(p)
        title = f"`{(p.name or p.cmdline or '')[:60]}`"
        if by_device.get(id(dev)):
            mine = sorted(by_device[id(dev)])
            pids = ", ".join(str(x) for x in mine[:3]) + (" …" if len(mine) > 3 else "")
            other[p.pid] = (
                f"possibly another server: named {title}, but this server is PID {pids} on "
                "that GPU (the log's evidence)"
            )
            continue
        why, contradiction = _corroboration(p, dev, size_matches, rank_devices, launch)
        if why is None:
            restart = " (or this one, restarted after the log ended)" if after_log else ""
            other[p.pid] = f"possibly another server{restart}: named {title}, {contradiction}"
            continue
        gib = p.used_bytes / GIB if p.used_bytes is not None else 0.0
        claims.setdefault((id(dev), _title_rank(p)), []).append((gib, p, why))
    for claimants in claims.values():
        best = max(claimants, key=lambda c: (size_matches(c[0]), c[0]))
        for _, p, why in claimants:
            if p is best[1]:
                server[p.pid] = f"named like a server process, and {why}"
            else:
                other[p.pid] = (
                    f"possibly another server: PID {best[1].pid} claims the same GPU and rank "
                    "with better evidence"
                )
    _children(snap.processes, {}, server)  # the children of the name-corroborated ones
    for pid in server:
        other.pop(pid, None)
    return Identity(server, other)


def _corroboration(
    p: Process,
    dev: Device | None,
    size_matches: Callable[[float | None], bool],
    rank_devices: Mapping[int, Device],
    launch: datetime | None,
) -> tuple[str | None, str]:
    """Why a server-named process is this server (None: nothing agrees), and else why not."""
    started = parse_time(p.start_time)
    if started is not None and launch is not None:
        gap = (started - launch).total_seconds()
        if gap < -START_SLACK_S:
            return None, (
                f"but it started {-gap / 60:.0f} min before the launch this log shows, so it "
                "is no process of that launch"
            )
        if gap <= START_WINDOW_S:
            return "it started with the launch this log shows", ""
    gib = p.used_bytes / GIB if p.used_bytes is not None else None
    if size_matches(gib):
        return f"its size ({gib:.2f} GiB) is what the log accounts to this server's process", ""
    rank = _title_rank(p)
    if rank is not None and dev is not None and rank_devices.get(rank) is dev:
        return f"its title's rank TP{rank} is a rank the log printed, on the GPU it maps to", ""
    return None, "and nothing ties it to this log (PID, parent, size, rank or start time)"


def _children(
    processes: Iterable[Process], known: Mapping[int, str], server: dict[int, str]
) -> None:
    """Processes whose parent chain reaches this server (a known PID or an identified process)."""
    parent = {p.pid: p.ppid for p in processes if p.ppid is not None}
    roots = set(known) | set(server)
    for pid in list(parent):
        if pid in server:
            continue
        up, depth = parent.get(pid), 0
        while up is not None and depth < MAX_DEPTH:
            if up in roots:
                server[pid] = f"a child of PID {up}, which is this server"
                break
            up, depth = parent.get(up), depth + 1
