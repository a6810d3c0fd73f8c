"""Bounded reads of user-named files (issue 22 item 2): devices, FIFOs, size caps, deep JSON,
non-finite numbers; and plan's numeric options (item 7)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from oomdoctor.read import bounded

MODEL = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


def _plan(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["plan", "--gpu", "H100", *args])
    return result.exit_code, result.stdout + result.stderr


def test_regular_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"a": 1.5}')
    assert bounded.read_json(path) == {"a": 1.5}


def test_symlink_to_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    link = tmp_path / "config.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(bounded.BoundedError, match="character device, not a regular file"):
        bounded.read_regular(link)


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(bounded.BoundedError, match="FIFO"):
        bounded.read_regular(fifo)  # no writer: a blocking open would wait forever


def test_size_is_capped(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2048)
    with pytest.raises(bounded.BoundedError, match="larger than 1024 bytes"):
        bounded.read_regular(path, limit=1024)


def test_deep_json_and_non_finite_numbers_are_refused(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(bounded.BoundedError, match="nested more than"):
        bounded.read_json(deep)
    for literal in ("1e400", "NaN", "-Infinity"):
        path = tmp_path / "n.json"
        path.write_text('{"x": ' + literal + "}")
        with pytest.raises(bounded.BoundedError, match="not finite"):
            bounded.read_json(path)


def _model_dir(tmp_path: Path, index: str | None = None) -> Path:
    directory = tmp_path / "m"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(MODEL))
    if index is not None:
        (directory / "model.safetensors.index.json").write_text(index)
    return directory


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: (p / "config.json").symlink_to("/dev/zero"), "character device"),
        (lambda p: os.mkfifo(p / "config.json"), "FIFO"),
        (lambda p: (p / "config.json").write_text("[" * 100_000), "nested more than"),
    ],
)
def test_plan_model_hostile_config_exits_2(tmp_path: Path, setup: object, message: str) -> None:
    setup(tmp_path)  # type: ignore[operator]
    code, out = _plan("--model", str(tmp_path / "config.json"))
    assert code == 2, out
    assert message in out and "Traceback" not in out


def test_plan_total_size_1e400_exits_2(tmp_path: Path) -> None:
    directory = _model_dir(tmp_path, '{"metadata": {"total_size": 1e400}}')
    code, out = _plan("--model", str(directory))
    assert code == 2, out
    assert "1e400 is not finite" in out


def test_dev_zero_config_does_not_grow_memory(tmp_path: Path) -> None:
    """In a subprocess with 1 GiB of address space: reading /dev/zero would die of MemoryError."""
    (tmp_path / "config.json").symlink_to("/dev/zero")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomdoctor",
            "plan",
            "--gpu",
            "H100",
            "--model",
            str(tmp_path / "config.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file" in proc.stderr


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--mem-fraction-static", "nan", "not a finite number"),
        ("--mem-fraction-static", "inf", "0.01<=x<=0.99"),
        ("--cuda-graph-max-bs", "1e23", "out of range"),
        ("--chunked-prefill-size", "1e23", "out of range"),
        ("--chunked-prefill-size", "1" + "0" * 23, "not in the range"),
        ("--context-length", "1.5", "not a whole number"),
    ],
)
def test_plan_refuses_nan_and_absurd_numbers(option: str, value: str, message: str) -> None:
    code, out = _plan("--weights", "16GiB", "--kv-bytes-per-token", "131072", option, value)
    assert code == 2, out
    assert message in out and "nan" not in out.split("Error:")[0].lower()


def test_plan_reads_scientific_whole_numbers() -> None:
    code, out = _plan(
        "--weights",
        "16GiB",
        "--kv-bytes-per-token",
        "131072",
        "--chunked-prefill-size",
        "8.192e3",
        "--format",
        "json",
    )
    assert code in (0, 1), out


def _run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # 1 GiB of address space: an unbounded read dies of MemoryError
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _fake_smi(tmp_path: Path, body: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body + "\n")
    smi.chmod(0o755)
    # no NVML here (the precheck finds no driver library), so snapshot falls back to nvidia-smi
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OOMDOCTOR_NVML_PRECHECK": "1"}


def test_flooding_nvidia_smi_is_stopped(tmp_path: Path) -> None:
    env = _fake_smi(tmp_path, "exec yes '<gpu><product_name>flood</product_name></gpu>'")
    proc = _run(["snapshot"], env)
    assert proc.returncode == 3, proc.stderr
    assert "printed more than 16 MiB; stopped" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_non_utf8_nvidia_smi_is_read(tmp_path: Path) -> None:
    xml = (
        "<?xml version='1.0'?><nvidia_smi_log><driver_version>550.54</driver_version>"
        "<attached_gpus>1</attached_gpus><gpu id='00000000:18:00.0'>"
        "<product_name>NVIDIA H100 \xe9</product_name><uuid>GPU-1</uuid>"
        "<fb_memory_usage><total>81559 MiB</total><used>1 MiB</used><free>81558 MiB</free>"
        "</fb_memory_usage><processes></processes></gpu></nvidia_smi_log>"
    )
    data = tmp_path / "out.xml"
    data.write_bytes(xml.encode("latin-1"))
    env = _fake_smi(tmp_path, f"cat '{data}'")
    proc = _run(["snapshot"], env)
    assert proc.returncode != 70 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "NVIDIA H100" in proc.stdout


def test_hanging_nvidia_smi_times_out(tmp_path: Path) -> None:
    from oomdoctor.read.bounded import run_capped

    with pytest.raises(bounded.BoundedError, match=r"within 0\.5 s"):
        run_capped([sys.executable, "-c", "import time; time.sleep(60)"], 0.5)


def _hung_nvml(tmp_path: Path) -> dict[str, str]:
    """A pynvml whose nvmlInit never returns (a driver hung after an Xid error)."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pynvml.py").write_text(
        "import time\n\nclass NVMLError(Exception):\n    pass\n\n"
        "def nvmlInit():\n    time.sleep(3600)\n"
    )
    return {
        "PYTHONPATH": str(fake),
        "OOMDOCTOR_NVML_PRECHECK": "0",
        "OOMDOCTOR_NVML_TIMEOUT_S": "1",
    }


OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.00 GiB is free.\n"
)


def test_hung_nvml_does_not_stop_diagnose(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(OOM)
    proc = _run(["diagnose", str(log)], _hung_nvml(tmp_path), timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "NVML did not answer within 1 s" in proc.stdout + proc.stderr


def test_hung_nvml_in_watch_says_the_snapshot_did_not_finish(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(OOM)
    script = f"cat '{log}'; sleep 0.2; exit 1"
    proc = _run(["watch", "--", "sh", "-c", script], _hung_nvml(tmp_path), timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "no crash signature was seen" not in proc.stderr
    assert "NVML did not answer within 1 s" in proc.stderr


@pytest.mark.parametrize("name", ["a.toml", "engine-markers.toml", "site-marks.toml"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_rule_dir_files_must_be_regular(tmp_path: Path, name: str, kind: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    if kind == "fifo":
        os.mkfifo(rules / name)
    else:
        (rules / name).symlink_to("/dev/zero")
    log = tmp_path / "x.log"
    log.write_text("hello\n")
    proc = _run(["diagnose", "--no-gpu", "--rules", str(rules), str(log)], timeout=30)
    assert proc.returncode == 3, proc.stderr
    assert f"{name}:1: cannot read: is a" in proc.stderr
    assert "not a regular file" in proc.stderr


def test_a_snapshot_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    from oomdoctor.gpu.loaders import load
    from oomdoctor.gpu.snapshot import SnapshotError

    fifo = tmp_path / "snap.xml"
    os.mkfifo(fifo)
    with pytest.raises(SnapshotError, match="a FIFO that no process writes to"):
        load([fifo])


def test_a_snapshot_from_a_pipe_is_read(tmp_path: Path) -> None:
    """`--snapshot <(nvidia-smi -q -x)`: a pipe with a writer, read to its end."""
    import threading

    from oomdoctor.gpu.loaders import load

    xml = (Path(__file__).parent.parent / "fixtures" / "snapshots" / "a100-mig.xml").read_bytes()
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb") as fh:
            fh.write(xml)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        snap = load([Path(f"/dev/fd/{read_end}")])
    finally:
        writer.join()
        os.close(read_end)
    assert snap.devices
