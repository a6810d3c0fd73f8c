"""`watch` keeps every byte and keeps control (issue 22 item 5): a grandchild's output after the
child exits, a grandchild that never closes the pipes, SIGKILL escalation while watch's own
reader is stalled, and shell statuses for commands that cannot start. Real process trees."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


def _watch(*command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", "watch", "--no-gpu", "--", *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd or REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def test_a_grandchild_printing_after_the_child_exits_is_passed_through() -> None:
    # The child exits at once; the grandchild prints 12 lines 6 s later (past the old 5 s drain)
    # and must not die of SIGPIPE: its last line says it finished.
    script = (
        "( sleep 6; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo late $i; done; echo done ) & "
        "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo early $i; done"
    )
    proc = _watch("sh", "-c", script)
    lines = proc.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("early")] == [f"early {i}" for i in range(1, 13)]
    assert [ln for ln in lines if ln.startswith("late")] == [f"late {i}" for i in range(1, 13)]
    assert lines[-1] == "done"
    assert proc.returncode == 0, proc.stderr


def test_a_grandchild_that_never_closes_is_bounded_and_named(tmp_path: Path) -> None:
    from oomdoctor import pipeline
    from oomdoctor.cli import supervise

    pidfile = tmp_path / "pid"
    parser = pipeline.stream_parser(pipeline.load_rules(), "<server output>")
    out_r, out_w = os.pipe()
    start = time.monotonic()
    result = supervise.run(
        ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo started"],
        parser,
        supervise.Capture(None),
        out_fd=out_w,
        drain_s=1.0,
    )
    elapsed = time.monotonic() - start
    os.close(out_w)
    grandchild = int(pidfile.read_text())
    try:
        assert os.read(out_r, 100) == b"started\n"
        assert result.status == 0
        assert result.held_open is not None and grandchild in result.held_open
        assert elapsed < 10
    finally:
        os.close(out_r)
        os.kill(grandchild, signal.SIGKILL)


DRIVER = """
import os, sys
from oomdoctor import pipeline
from oomdoctor.cli import supervise
stalled_r, stalled_w = os.pipe()  # a reader that never reads: writes to it block
parser = pipeline.stream_parser(pipeline.load_rules(), "<server output>")
script = "trap '' TERM; echo $$ > {pidfile}; while :; do echo flood flood flood flood; done"
supervise.run(["sh", "-c", script], parser, supervise.Capture(None), out_fd=stalled_w,
              term_timeout_s=1.0)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigkill_escalation_runs_while_the_reader_is_stalled(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(pidfile=pidfile)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.05)
        server = int(pidfile.read_text())
        time.sleep(1.0)  # the pipe fills; watch blocks writing to the stalled reader
        driver.send_signal(signal.SIGTERM)  # forwarded; the server ignores it
        deadline = time.monotonic() + 8
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), "SIGKILL never came while the reader was stalled"
    finally:
        driver.kill()
        driver.wait(10)
        if pidfile.exists() and pidfile.read_text().strip():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    ("content", "mode", "status", "message"),
    [
        (b"\x7fELF\x02\x01\x01 not really", 0o755, 126, "not an executable format"),
        (b"echo hi\n", 0o644, 126, "permission denied (not executable)"),
        (
            b"#!/nonexistent/python3\nprint(1)\n",
            0o755,
            127,
            "'/nonexistent/python3' (the #! line) is not found",
        ),
    ],
)
def test_exec_failures_use_shell_statuses(
    tmp_path: Path, content: bytes, mode: int, status: int, message: str
) -> None:
    program = tmp_path / "prog"
    program.write_bytes(content)
    program.chmod(mode)
    proc = _watch("./prog", cwd=tmp_path)
    assert proc.returncode == status, proc.stderr
    assert message in proc.stderr
    assert "no such command" not in proc.stderr


def test_a_missing_command_is_127_and_a_directory_126(tmp_path: Path) -> None:
    proc = _watch("no-such-command-anywhere")
    assert proc.returncode == 127 and "no such command" in proc.stderr
    proc = _watch(str(tmp_path))
    assert proc.returncode == 126 and "is a directory" in proc.stderr
