"""The NVML reader with the driver faked: normal, MIG, no library, no permission, other namespace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from oomdoctor.gpu import nvml
from oomdoctor.gpu.snapshot import Snapshot
from oomdoctor.gpu.view import Unavailable
from tests import fake_nvml
from tests.fake_nvml import FakeGpu

GIB = 1 << 30
H100 = 81559 << 20


def _proc(root: Path, pid: int, cmdline: str, comm: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    (d / "comm").write_text(comm + "\n")


def _two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(
            "GPU-aaaa",
            "00000000:3B:00.0",
            "NVIDIA H100 80GB HBM3",
            H100,
            70 * GIB,
            processes=[(4187, 60 * GIB), (31337, 9 * GIB), (777777, 1 * GIB)],
        ),
        FakeGpu("GPU-bbbb", "00000000:5E:00.0", "NVIDIA H100 80GB HBM3", H100, 0),
    ]


def test_normal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = fake_nvml.make(_two_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    _proc(tmp_path, 4187, "sglang::scheduler_TP0", "sglang::schedul")
    _proc(tmp_path, 31337, "/opt/conda/bin/python -m ipykernel_launcher", "python")
    snap = nvml.take(proc_root=tmp_path)
    assert isinstance(snap, Snapshot)
    assert fake.calls == ["init", "shutdown"]
    assert [d.uuid for d in snap.devices] == ["GPU-aaaa", "GPU-bbbb"]
    dev = snap.devices[0]
    assert dev.pci_bus_id == "00000000:3b:00.0"
    assert (
        dev.total_bytes == H100 and dev.used_bytes == 70 * GIB and dev.reserved_bytes == 512 << 20
    )
    assert dev.mig_mode == "disabled"
    procs = {p.pid: p for p in snap.processes}
    assert procs[4187].name == "sglang::scheduler_TP0"  # the full title, not the 15-char comm
    assert procs[31337].name == "python" and procs[31337].visible
    assert procs[777777].name is None and procs[777777].visible is False  # other namespace: kept
    assert procs[777777].used_bytes == GIB
    assert snap.device_of(procs[4187]) is dev
    assert snap.cuda_version == "12.4" and snap.driver_version == "550.54.15"


def test_mig_memory_is_unknown_not_zero(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpu = FakeGpu(
        "GPU-mig",
        "00000000:3B:00.0",
        "NVIDIA A100-SXM4-80GB",
        81920 << 20,
        10 * GIB,
        mig=1,
        processes=[(1234, None)],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make([gpu]))
    snap = nvml.take(proc_root=tmp_path)
    assert isinstance(snap, Snapshot)
    assert snap.devices[0].mig_mode == "enabled"
    assert snap.processes[0].used_bytes is None


def test_library_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_nvml.make([], init_error=fake_nvml.NVMLError_LibraryNotFound)
    )
    state = nvml.take()
    assert isinstance(state, Unavailable)
    assert "NVML is not available" in state.reason
    assert state.hint and "--snapshot" in state.hint


def test_no_permission_for_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpus = _two_gpus()
    gpus[0].deny_processes = True
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make(gpus))
    snap = nvml.take(proc_root=tmp_path)
    assert isinstance(snap, Snapshot)
    assert len(snap.devices) == 2 and not snap.processes
    assert any("could not list its processes" in n for n in snap.notes)


def test_old_driver_without_v2_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make(_two_gpus(), no_v2=True))
    snap = nvml.take(proc_root=tmp_path)
    assert isinstance(snap, Snapshot)
    assert snap.devices[0].reserved_bytes is None
    assert snap.devices[0].used_bytes == 70 * GIB + (512 << 20)  # v1 'used' includes reserved


def test_snapshot_command_writes_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make(_two_gpus()))
    out = tmp_path / "snap.json"
    result = CliRunner().invoke(cli, ["snapshot", "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == "oomdoctor-snapshot" and data["version"] == 1
    assert {p["pid"] for p in data["processes"]} == {4187, 31337, 777777}


def test_snapshot_command_without_gpu_exits_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_nvml.make([], init_error=fake_nvml.NVMLError_LibraryNotFound)
    )
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi to fall back on
    result = CliRunner().invoke(cli, ["snapshot"])
    assert result.exit_code == 3
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("oomdoctor: no GPU state: NVML is not available")
    assert "nvidia-smi is not on PATH" in lines[0]
    assert lines[1].startswith("hint: ")


def test_snapshot_roundtrip_through_diagnose(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A snapshot saved on the GPU host and read elsewhere gives the same holders."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make(_two_gpus()))
    snap = tmp_path / "snap.json"
    assert CliRunner().invoke(cli, ["snapshot", "-o", str(snap)]).exit_code == 0
    from oomdoctor.gpu.loaders import load
    from oomdoctor.gpu.snapshot import from_json

    assert load([snap]) == from_json(json.loads(snap.read_text()))


def test_live_snapshot_is_used_by_diagnose(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import FIXTURES

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make(_two_gpus()))
    log = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json"])
    gpu = json.loads(result.stdout)["gpu"]
    assert gpu["available"] and gpu["source"] == "nvml"
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json", "--no-gpu"])
    gpu = json.loads(result.stdout)["gpu"]
    assert not gpu["available"] and "--no-gpu" in gpu["reason"]


def test_without_a_driver_library_pynvml_is_not_even_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A laptop reading a log copied off the GPU host: no libnvidia-ml, no pynvml import."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setattr(nvml, "_import", _must_not_import)
    monkeypatch.setattr(sys, "platform", "linux")
    import ctypes

    def no_library(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    state = nvml.take()
    assert isinstance(state, Unavailable)
    assert "no NVIDIA driver here" in state.reason
    assert state.hint and "--snapshot" in state.hint


def test_precheck_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setenv("OOMDOCTOR_NVML_PRECHECK", "0")
    monkeypatch.setattr(nvml, "_import", lambda: fake_nvml.make(_two_gpus()))
    state = nvml.take()
    assert not isinstance(state, Unavailable)
    assert len(state.devices) == 2


def _must_not_import() -> None:
    raise AssertionError("pynvml was imported although the driver library is missing")
