"""`oomdoctor watch` and `diagnose --follow`: byte-identical pass-through, exit status, signals,
snapshot timing (fake NVML), and nothing left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

FAKE = str(REPO / "tests" / "fake_server.py")
LOG = str(FIXTURES / "sglang-0.5.2" / "worked-example-y085.log")
CLEAN = str(FIXTURES / "sglang-0.5.23" / "healthy-startup.log")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "fakes"), env.get("PYTHONPATH", "")])
    env["OOMDOCTOR_NVML_PRECHECK"] = "0"  # the fake pynvml needs no driver library
    return env


def _watch(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", "watch", *args],
        capture_output=True,
        env=env or _env(),
        timeout=timeout,
        cwd=REPO,
    )


def _direct(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, FAKE, *args], capture_output=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_pass_through_is_byte_identical_then_the_diagnosis() -> None:
    direct = _direct(LOG, "--mode", "crash")
    watched = _watch("--no-gpu", "--", sys.executable, FAKE, LOG, "--mode", "crash")
    assert watched.returncode == direct.returncode == 1
    assert watched.stdout == direct.stdout
    assert watched.stderr.startswith(direct.stderr)
    report = watched.stderr[len(direct.stderr) :].decode()
    assert report.startswith("\n-- oomdoctor --\nruntime_activation")
    assert "--mem-fraction-static" in report


def test_log_file_holds_a_byte_identical_copy(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    watched = _watch("--no-gpu", "--log", str(log), "--", sys.executable, FAKE, LOG, "--one-stream")
    assert log.read_bytes() == Path(LOG).read_bytes()  # one stream: order is the file's order
    both = tmp_path / "both.log"
    watched = _watch("--no-gpu", "--log", str(both), "--", sys.executable, FAKE, LOG)
    direct = _direct(LOG)
    data = both.read_bytes()
    assert len(data) == len(direct.stdout) + len(direct.stderr)
    assert sorted(data.splitlines()) == sorted((direct.stdout + direct.stderr).splitlines())
    assert watched.returncode == 1


def test_binary_burst_and_invalid_utf8_pass_through(tmp_path: Path) -> None:
    direct = _direct(LOG, "--burst-mb", "50")
    watched = _watch("--no-gpu", "--", sys.executable, FAKE, LOG, "--burst-mb", "50")
    assert len(watched.stdout) > 50 << 20
    assert watched.stdout == direct.stdout
    assert watched.stderr.startswith(direct.stderr)


@pytest.mark.parametrize(("mode", "status"), [("clean", 0), ("signal", 128 + 9)])
def test_exit_status_mirrors_the_child(mode: str, status: int) -> None:
    watched = _watch("--no-gpu", "--", sys.executable, FAKE, CLEAN, "--mode", mode)
    assert watched.returncode == status
    if mode == "clean":
        assert b"-- oomdoctor --" not in watched.stderr  # a clean exit gets no report...
        again = _watch("--no-gpu", "--always", "--", sys.executable, FAKE, CLEAN, "--mode", "clean")
        assert b"-- oomdoctor --" in again.stderr  # ...unless asked


def test_report_file_and_missing_command(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    _watch("--no-gpu", "-o", str(report), "--format", "json", "--", sys.executable, FAKE, LOG)
    assert json.loads(report.read_text())["verdict"]["category"] == "runtime_activation"
    missing = _watch("--", "/nonexistent/binary")
    assert missing.returncode == 127 and b"no such command" in missing.stderr


def test_snapshot_is_taken_between_the_crash_line_and_the_exit(tmp_path: Path) -> None:
    stamp, exit_stamp, report = tmp_path / "nvml", tmp_path / "exit", tmp_path / "r.json"
    watched = _watch(
        "-o",
        str(report),
        "--format",
        "json",
        "--",
        sys.executable,
        FAKE,
        LOG,
        "--exit-stamp",
        str(exit_stamp),
        env=_env(FAKE_NVML_STAMP=str(stamp)),
    )
    assert watched.returncode == 1
    data = json.loads(report.read_text())
    assert data["gpu"]["available"] and data["gpu"]["source"] == "nvml"
    snap_t, exit_t = float(stamp.read_text()), float(exit_stamp.read_text())
    assert snap_t < exit_t
    capture = data["capture"]
    assert capture["crash_line"] >= 1 and capture["snapshot_after_s"] is not None
    assert 0 <= capture["snapshot_after_s"] < exit_t - snap_t + 5


def _start_hanging(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oomdoctor",
            "watch",
            "--no-gpu",
            "--grace",
            "0.5",
            *extra,
            "--",
            sys.executable,
            FAKE,
            LOG,
            "--mode",
            "hang",
            "--pidfile",
            str(pidfile),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    )
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    return proc, int(pidfile.read_text())


def test_hung_server_is_diagnosed_and_sigterm_leaves_nothing_running(tmp_path: Path) -> None:
    proc, child = _start_hanging(tmp_path)
    time.sleep(3.0)  # replay, crash line, grace
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert b"-- oomdoctor --" in err  # diagnosed while the server hung
    assert proc.returncode == 128 + signal.SIGTERM
    time.sleep(0.2)
    assert not _alive(child)


def test_second_ctrl_c_kills(tmp_path: Path) -> None:
    proc, child = _start_hanging(tmp_path)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode in (128 + signal.SIGINT, 128 + signal.SIGKILL)
    time.sleep(0.2)
    assert not _alive(child)


def test_follow_tee_reproduces_the_input() -> None:
    data = Path(LOG).read_bytes() + b"\xff\xfe tail without newline"
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "diagnose", "--follow", "--tee", "--no-gpu", "-"],
        input=data,
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.stdout == data
    assert proc.returncode == 1
    assert b"runtime_activation" in proc.stderr


def test_follow_without_tee_reports_on_stdout() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "diagnose", "--follow", "--format", "json", "--no-gpu"],
        input=Path(LOG).read_bytes(),
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    rep = json.loads(proc.stdout)
    assert rep["verdict"]["category"] == "runtime_activation"
    assert rep["capture"]["crash_line"] > 0
