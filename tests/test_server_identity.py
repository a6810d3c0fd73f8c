"""Issue 22 §4: this server is identified in a GPU snapshot by evidence, never by a name alone.

A second `sglang::scheduler` with another PID, or a trainer whose command line mentions
`sglang.srt`, is a co-tenant ("possibly another server"); the PID the log prints is this server,
and so are its children (the snapshot's parent PIDs). Snapshots in oomdoctor's JSON form
(../shared/reference/gpu-snapshots.md), on the log of fixtures/sglang-0.5.2, whose OOM message
names the server's own process as `Process 3190577` (the container trap).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oomdoctor import pipeline
from oomdoctor.gpu.identify import identify
from oomdoctor.gpu.loaders import load
from oomdoctor.gpu.snapshot import Process, Snapshot
from oomdoctor.report.build import build_report
from oomdoctor.rules.schema import Rule
from tests.conftest import FIXTURES

LOG = FIXTURES / "sglang-0.5.2" / "runtime-oom-container-snapshot.log"
SNAP = FIXTURES / "snapshots" / "container-self.json"
SERVER = 3190577
GIB = 1 << 30


def _snapshot(tmp_path: Path, *extra: dict[str, Any], server: dict[str, Any] | None = None) -> Path:
    data = json.loads(SNAP.read_text())
    base = data["processes"][0]
    if server:
        base.update(server)
    uuid, bus = base["gpu_uuid"], base["gpu_bus_id"]
    for p in extra:
        data["processes"].append({"gpu_uuid": uuid, "gpu_bus_id": bus, "visible": True, **p})
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return path


def _run(rules: tuple[Rule, ...], snap: Path) -> dict[str, Any]:
    return build_report(pipeline.run([str(LOG)], rules, gpu=load([snap])))


def _roles(report: dict[str, Any]) -> dict[int, tuple[str, str]]:
    return {p["pid"]: (p["role"], p["why"]) for p in report["gpu"]["processes"]}


def test_the_pid_the_log_prints_is_this_server(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    report = _run(rules, _snapshot(tmp_path, server={"name": "python3", "visible": True}))
    role, why = _roles(report)[SERVER]
    assert role == "server" and "which the log names" in why
    assert report["verdict"]["category"] == "runtime_activation"


@pytest.mark.parametrize(
    ("name", "cmdline"),
    [
        ("sglang::scheduler_TP0", "sglang::scheduler_TP0"),  # a second server, same title
        ("python3", "python3 train.py --rollout sglang.srt.entrypoints.engine --tp 1"),  # trainer
        ("python3", "/usr/bin/python3 -m vllm serve Qwen/Qwen2.5-7B"),
    ],
)
def test_a_name_alone_makes_a_cotenant(
    tmp_path: Path, rules: tuple[Rule, ...], name: str, cmdline: str
) -> None:
    other = {"pid": 4444, "used_bytes": 12 * GIB, "name": name, "cmdline": cmdline}
    report = _run(rules, _snapshot(tmp_path, other))
    roles = _roles(report)
    assert roles[SERVER][0] == "server"
    role, why = roles[4444]
    assert role == "foreign" and why.startswith("possibly another server")
    assert report["verdict"]["category"] == "cotenant_pressure"
    assert any("Process 4444" in a["text"] for a in report["actions"])


def test_children_of_the_server_are_the_server(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    """A child process holding memory (a detokenizer, a worker) is the server through its
    parent chain, whatever it is called; one named like a server but of another parent is not."""
    child = {"pid": 5000, "ppid": 4999, "used_bytes": GIB // 2, "name": "python3"}
    middle = {"pid": 4999, "ppid": SERVER, "used_bytes": GIB // 4, "name": "python3"}
    stranger = {"pid": 6000, "ppid": 1, "used_bytes": 12 * GIB, "name": "sglang::scheduler_TP0"}
    roles = _roles(_run(rules, _snapshot(tmp_path, child, middle, stranger)))
    assert roles[5000][0] == "server" and "child of PID" in roles[5000][1]
    assert roles[4999][0] == "server"
    assert roles[6000][0] == "foreign"


def _proc(pid: int, name: str, gib: float, **kw: Any) -> Process:
    return Process(pid, "GPU-x", None, int(gib * GIB), name, name, True, "C", **kw)


def _snap(*procs: Process) -> Snapshot:
    from oomdoctor.gpu.snapshot import Device

    dev = Device(0, "GPU-x", None, "H100", 80 * GIB, 70 * GIB, 10 * GIB)
    return Snapshot("nvml", None, None, None, None, (dev,), procs)


def test_a_title_is_this_server_only_where_something_agrees() -> None:
    snap = _snap(_proc(10, "sglang::scheduler_TP0", 60.0), _proc(11, "sglang::scheduler_TP0", 9.0))
    # The size the log accounts to this process picks the one that is the server.
    ident = identify(snap, {}, lambda g: g is not None and abs(g - 60.0) < 2, {}, None)
    assert set(ident.server) == {10} and set(ident.other_server) == {11}
    # Nothing agrees with either: both are "possibly another server".
    ident = identify(snap, {}, lambda g: False, {}, None)
    assert not ident.server and set(ident.other_server) == {10, 11}
    # The title's rank is one the log printed, on the GPU that rank maps to.
    ident = identify(snap, {}, lambda g: False, {0: snap.devices[0]}, None)
    assert set(ident.server) == {10}  # the larger of two equal claims


def test_start_time_against_the_launch() -> None:
    early = _proc(10, "sglang::scheduler", 9.0, start_time="2026-03-14 07:00:00")
    on_time = _proc(11, "sglang::scheduler", 9.0, start_time="2026-03-14 09:00:20")
    ident = identify(_snap(early, on_time), {}, lambda g: False, {}, "2026-03-14 09:00:00")
    assert set(ident.server) == {11}
    assert "before the launch" in ident.other_server[10]


def test_a_live_snapshot_records_parent_and_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """NVML's reader takes each visible PID's parent and start time from /proc."""
    import os
    import sys
    from datetime import datetime

    from oomdoctor.gpu import nvml
    from tests import fake_nvml
    from tests.fake_nvml import FakeGpu

    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1767225600\n")
    d = tmp_path / "4187"
    d.mkdir()
    (d / "cmdline").write_bytes(b"sglang::scheduler_TP0\0")
    (d / "comm").write_text("sglang::schedul\n")
    rest = " ".join(["0"] * 17)  # fields 5-21 (pgrp .. nice, num_threads, itrealvalue)
    (d / "stat").write_text(f"4187 (sglang::schedul) S 4100 {rest} {90 * ticks} 0 0\n")
    procs_on: list[tuple[int, int | None]] = [(4187, 60 * GIB), (777777, GIB)]
    gpu = FakeGpu("GPU-aaaa", "00000000:3B:00.0", "H100", 80 * GIB, 70 * GIB, processes=procs_on)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make([gpu]))
    snap = nvml.take(proc_root=tmp_path)
    assert isinstance(snap, Snapshot)
    procs = {p.pid: p for p in snap.processes}
    assert procs[4187].ppid == 4100
    started = datetime.fromisoformat(procs[4187].start_time or "")
    assert started.timestamp() == 1767225600 + 90
    assert procs[777777].ppid is None and procs[777777].start_time is None  # not visible
