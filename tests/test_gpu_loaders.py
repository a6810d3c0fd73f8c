"""Snapshot files in the exact nvidia-smi formats and oomdoctor's JSON, and the co-tenant reading
of a log against them (TP rank → GPU mapping, Omni siblings, the container trap)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from oomdoctor.gpu.loaders import load
from oomdoctor.gpu.snapshot import SnapshotError, from_json, to_json
from tests.conftest import FIXTURES

SNAP = FIXTURES / "snapshots"
MIB = 1 << 20


def test_xml() -> None:
    snap = load([SNAP / "h100-notebook.xml"])
    assert snap.source == "nvidia-smi -q -x"
    assert snap.driver_version == "550.127.05" and snap.cuda_version == "12.4"
    (dev,) = snap.devices
    assert dev.uuid == "GPU-6f1d3a52-9c0e-8b47-2d15-e3a7c90b41f8"
    assert dev.pci_bus_id == "00000000:18:00.0"
    assert dev.total_bytes == 81559 * MIB and dev.reserved_bytes == 551 * MIB
    assert dev.mig_mode == "disabled"
    (proc,) = snap.processes
    assert proc.pid == 31337 and proc.used_bytes == 28672 * MIB
    assert snap.device_of(proc) is dev


def test_mig_xml_keeps_unknown_sizes_unknown() -> None:
    snap = load([SNAP / "a100-mig.xml"])
    assert snap.devices[0].mig_mode == "enabled"
    assert snap.processes and all(p.used_bytes is None for p in snap.processes)


def test_csv_apps_joined_with_query_gpu() -> None:
    snap = load([SNAP / "a100-grown-cotenant.csv", SNAP / "a100-grown-cotenant-gpus.csv"])
    (dev,) = snap.devices
    assert dev.total_bytes == 81920 * MIB and dev.index == 0
    pids = {p.pid: p for p in snap.processes}
    assert pids[4242].used_bytes == 12288 * MIB and pids[4242].name == "python3"
    assert all(snap.device_of(p) is dev for p in snap.processes)


def test_csv_sections_in_one_file(tmp_path: Path) -> None:
    both = tmp_path / "both.csv"
    both.write_text(
        (SNAP / "a100-grown-cotenant-gpus.csv").read_text()
        + (SNAP / "a100-grown-cotenant.csv").read_text()
    )
    snap = load([both])
    assert len(snap.devices) == 1 and len(snap.processes) == 2


def test_noheader_nounits_csv() -> None:
    snap = load([SNAP / "h100-monitor-noheader.csv"])
    assert not snap.devices
    pids = {p.pid: p for p in snap.processes}
    assert pids[5151].used_bytes == 512 * MIB
    assert pids[5151].name == "/opt/telemetry/bin/gpu-metrics-agent"
    assert pids[5151].gpu_bus_id == "00000000:4c:00.0"


def test_json_roundtrip() -> None:
    snap = load([SNAP / "h200x4-imbalance.json"])
    assert from_json(to_json(snap)) == snap
    assert len(snap.devices) == 4


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON"),
        ('{"schema": "other"}', "not an oomdoctor snapshot"),
        ("<html><body/></html>", "not <nvidia_smi_log>"),
        ('<!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>', "entity declarations"),
        ("<nvidia_smi_log>", "invalid XML"),
        ("", "empty"),
        ("hello, world\n", "cannot read a pid"),
        ("GPU-1, 00000000:01:00.0, python3, 5 MiB\n", "cannot read a pid"),
    ],
)
def test_bad_snapshots_say_why(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.snap"
    bad.write_text(content)
    with pytest.raises(SnapshotError, match=message):
        load([bad])


def test_cli_rejects_an_unreadable_snapshot(tmp_path: Path) -> None:
    log = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--snapshot", str(tmp_path)])
    assert result.exit_code == 3
    assert result.stderr.startswith("oomdoctor: cannot read the snapshot: ")
    assert "is a directory" in result.stderr.splitlines()[0]
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--snapshot", "x", "--no-gpu"])
    assert result.exit_code == 2


def test_tp_imbalance_names_the_holder_on_the_tight_gpu(report_of: Callable[..., dict]) -> None:
    rep = report_of(
        FIXTURES / "sglang-0.5.23" / "tp-imbalance-runtimeerror.log",
        (SNAP / "h200x4-imbalance.json",),
    )
    assert rep["verdict"]["category"] == "cotenant_pressure"
    foreign = [p for p in rep["gpu"]["processes"] if p["role"] == "foreign"]
    assert [(p["pid"], p["gpu_index"], p["used_gib"]) for p in foreign] == [(20488, 3, 47.75)]
    servers = sorted(p["pid"] for p in rep["gpu"]["processes"] if p["is_server"])
    assert servers == [21734, 21735, 21736, 21737]
    assert any("20488" in a["text"] and "47.75 GiB" in a["text"] for a in rep["actions"])


def test_omni_siblings_in_the_snapshot_are_not_cotenants(report_of: Callable[..., dict]) -> None:
    rep = report_of(
        FIXTURES / "omni-0.1.9" / "omni-image-encoder-oom.log", (SNAP / "omni-h200.xml",)
    )
    assert rep["verdict"]["category"] == "encoder_starvation"
    roles = {p["pid"]: p["role"] for p in rep["gpu"]["processes"]}
    assert all(roles[pid] == "sibling" for pid in (4121, 4122, 4187, 4190) if pid in roles)
    assert "foreign" not in roles.values()


def test_startup_cotenant_cost_and_start(report_of: Callable[..., dict]) -> None:
    rep = report_of(
        FIXTURES / "sglang-0.5.10" / "startup-kv-cotenant-notebook.log",
        (SNAP / "h100-notebook.xml",),
    )
    (holder,) = [p for p in rep["gpu"]["processes"] if p["role"] == "foreign"]
    assert holder["pid"] == 31337 and holder["present_at_start"] is True
    y = rep["budget"]["mem_fraction_static"]
    assert holder["kv_cost_gib"] == pytest.approx(y * 28.0, abs=0.01)
    first = rep["actions"][0]["text"]
    assert "31337" in first and "there since before the server started" in first


def test_snapshot_far_from_the_log_is_flagged(
    tmp_path: Path, report_of: Callable[..., dict]
) -> None:
    data = json.loads((SNAP / "container-self.json").read_text())
    data["time"] = "2031-01-01T00:00:00+00:00"
    late = tmp_path / "late.json"
    late.write_text(json.dumps(data))
    rep = report_of(FIXTURES / "sglang-0.5.2" / "runtime-oom-container-snapshot.log", (late,))
    assert any(
        "the snapshot was taken" in n and "after the log's last line" in n for n in rep["notices"]
    )
