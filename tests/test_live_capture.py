"""Live capture (issue 21, item 1): `diagnose -`, `diagnose --follow -` (with and without `--tee`)
and `diagnose --follow FILE` report on what they read at whichever comes first: the crash line
plus `--grace`, the end of the input, or SIGINT/SIGTERM; a second Ctrl-C quits at once.

Real processes: a fake server that prints a real SGLang log, crashes and hangs (it ignores SIGINT
and SIGTERM, as a hung SGLang can), piped into `python -m oomdoctor`, and real signals sent to the
process group, as a terminal's Ctrl-C is. The fake server prints the crash only once oomdoctor is
reading (its pipe is empty), so the time from the crash line to the report is measured, not
oomdoctor's start-up."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.conftest import FIXTURES, REPO

LOG = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
VERDICT = "startup_kv_alloc"
OOMDOCTOR = [sys.executable, "-m", "oomdoctor"]
GRACE = 0.5
#: How long past --grace the report may take: diagnosing and rendering, on a busy machine.
SLACK_S = 4.0
WAIT_S = 60.0
LINES = LOG.read_bytes().count(b"\n")

linux_proc = pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs /proc")

#: Prints argv[1] up to its crash line, waits until its stdout pipe is drained (the reader is
#: reading), prints the rest, writes the time to argv[2], and hangs (printing one more line
#: argv[3] seconds later, if given).
FAKE_SERVER = r"""
import fcntl, signal, struct, sys, termios, time
from pathlib import Path

for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
data = Path(sys.argv[1]).read_bytes()
cut = data.rfind(b"\n", 0, data.index(b"hit an exception")) + 1
out = sys.stdout.buffer
out.write(data[:cut])
out.flush()
end = time.monotonic() + 60
while time.monotonic() < end:
    if struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, b"\0\0\0\0"))[0] == 0:
        break
    time.sleep(0.01)
time.sleep(0.1)
out.write(data[cut:])
out.flush()
Path(sys.argv[2]).write_text(repr(time.time()))
if len(sys.argv) > 3:  # a line long after the crash
    time.sleep(float(sys.argv[3]))
    out.write(b"[2025-09-22 08:15:30] still hung\n")
    out.flush()
while True:
    time.sleep(1)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["OOMDOCTOR_NVML_PRECHECK"] = "0"
    for name in ("FORCE_COLOR", "COLUMNS"):
        env.pop(name, None)
    return env


def _in_group(pgid: int) -> dict[str, Any]:
    """Popen's arguments that put the child in the process group ``pgid`` (0: a new one), in
    this session, as a shell puts the processes of a job."""
    if sys.version_info >= (3, 11):
        return {"process_group": pgid}
    return {"preexec_fn": lambda: os.setpgid(0, pgid)}  # pragma: no cover - Python 3.10


def _split() -> tuple[bytes, bytes]:
    """The log before its crash line, and from it on."""
    data = LOG.read_bytes()
    cut = data.rfind(b"\n", 0, data.index(b"hit an exception")) + 1
    return data[:cut], data[cut:]


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` (either end)."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def _until(test: Any, what: str, timeout: float = WAIT_S) -> None:
    end = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def _stamp(path: Path) -> float:
    _until(path.exists, "the crash line")
    _until(lambda: path.read_text() != "", "the crash stamp")
    return float(path.read_text())


class Pipeline:
    """``server | oomdoctor ARGS``, the two in one process group (as a shell's job is), the
    report on files; killed whole at the end."""

    def __init__(
        self, tmp: Path, args: list[str], server: list[str] | None = None, later: str = ""
    ) -> None:
        script = tmp / "server.py"
        script.write_text(FAKE_SERVER)
        self.stamp = tmp / "crashed-at"
        self.out = (tmp / "out").open("wb+")
        self.err = (tmp / "err").open("wb+")
        fake = [sys.executable, str(script), str(LOG), str(self.stamp), *([later] if later else [])]
        cmd = server or fake
        self.server = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=_env(), **_in_group(0))
        assert self.server.stdout is not None
        self.pgid = self.server.pid
        self.doctor = subprocess.Popen(
            [*OOMDOCTOR, "diagnose", "--no-gpu", *args],
            stdin=self.server.stdout,
            stdout=self.out,
            stderr=self.err,
            cwd=REPO,
            env=_env(),
            **_in_group(self.pgid),
        )
        self.server.stdout.close()

    def signal(self, signum: int) -> None:
        os.killpg(self.pgid, signum)

    def wait(self) -> tuple[int, str, str, float]:
        """oomdoctor's exit status, stdout, stderr, and when it exited (time.time())."""
        code = self.doctor.wait(WAIT_S)
        ended = time.time()
        return code, _read(self.out), _read(self.err), ended

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        for proc in (self.server, self.doctor):
            proc.wait(WAIT_S)
        self.out.close()
        self.err.close()


def _read(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "replace")


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Any]:
    made: list[Pipeline] = []

    def start(*args: str) -> Pipeline:
        made.append(Pipeline(tmp_path, list(args)))
        return made[-1]

    yield start
    for p in made:
        p.close()


def _clean(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err


# -- Ctrl-C and SIGTERM ---------------------------------------------------------------------------


#: The README's pipe recipes, as a shell runs them: {doctor} is `python -m oomdoctor diagnose
#: --no-gpu --grace 60 ARGS` with its stdout and stderr on files; {copy} is the file `tee` writes.
RECIPES = {
    "dash": ("-",),
    "implicit-stdin": (),
    "follow-tee-into-tee": ("--follow", "--tee", "-"),
}


@pytest.mark.parametrize("recipe", RECIPES)
def test_readme_recipes_print_the_report_at_ctrl_c(tmp_path: Path, recipe: str) -> None:
    """`server 2>&1 | oomdoctor diagnose -` (and the others) in a shell, then Ctrl-C to the
    job's process group: the report of the crash, exit 1."""
    args = RECIPES[recipe]
    script = tmp_path / "server.py"
    script.write_text(FAKE_SERVER)
    stamp, rc, copy = tmp_path / "crashed-at", tmp_path / "rc", tmp_path / "server.log"
    q = shlex.quote
    out, err = tmp_path / "out", tmp_path / "err"
    doctor = f'"$0" -m oomdoctor diagnose --no-gpu --grace 60 {" ".join(args)}'
    tee = "--tee" in args
    report = f"2>{q(str(err))}" if tee else f">{q(str(out))} 2>{q(str(err))}"
    line = (
        f'"$0" {q(str(script))} {q(str(LOG))} {q(str(stamp))} 2>&1 | '
        f"{{ {doctor} {report}; echo $? >{q(str(rc))}; }}"
        + (f" | tee {q(str(copy))} >/dev/null" if tee else "")
    )
    shell = subprocess.Popen(
        ["bash", "-c", line, sys.executable], start_new_session=True, cwd=REPO, env=_env()
    )
    try:
        _stamp(stamp)
        time.sleep(0.3)
        os.killpg(shell.pid, signal.SIGINT)
        _until(lambda: rc.exists() and rc.read_text().strip() != "", "oomdoctor's exit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(WAIT_S)
    report_text = err.read_text() if tee else out.read_text()
    assert rc.read_text().strip() == "1", err.read_text()
    assert f"\n{VERDICT}  (" in f"\n{report_text}", report_text
    assert "reading stopped at SIGINT (Ctrl-C)" in " ".join(report_text.split())
    assert "oomdoctor: SIGINT (Ctrl-C): reporting on what was read" in err.read_text()
    if tee:  # `tee` had every line before the Ctrl-C ended it too
        assert copy.read_bytes() == LOG.read_bytes()
    _clean(err.read_text())


def test_follow_tee_ctrl_c_keeps_every_line_and_reports(pipeline: Any) -> None:
    p = pipeline("--follow", "--tee", "--grace", "60", "-")
    _stamp(p.stamp)
    time.sleep(0.3)
    p.signal(signal.SIGINT)
    code, out, err, _ = p.wait()
    assert out.encode() == LOG.read_bytes()  # the copy: every byte, in order
    assert code == 1
    assert f"\n{VERDICT}  (" in f"\n{err}"
    assert "reading stopped at SIGINT" in " ".join(err.split())
    _clean(err)


def test_follow_tee_goes_on_copying_after_a_grace_report(tmp_path: Path) -> None:
    p = Pipeline(tmp_path, ["--follow", "--tee", "--grace", str(GRACE), "-"], later="1.5")
    try:
        _stamp(p.stamp)
        _until(lambda: b"still hung" in (tmp_path / "out").read_bytes(), "the later line")
        assert p.doctor.poll() is None  # still copying
        p.signal(signal.SIGINT)
        code, out, err, _ = p.wait()
    finally:
        p.close()
    assert out.encode() == LOG.read_bytes() + b"[2025-09-22 08:15:30] still hung\n"
    assert code == 1
    report, _, after = err.partition("oomdoctor: the input is still open after the report")
    assert report.startswith(VERDICT) and "(--grace)" in report
    assert "copying it on (--tee) until it ends or Ctrl-C" in after
    _clean(err)


def test_sigterm_reports_on_what_was_read(pipeline: Any) -> None:
    p = pipeline("--grace", "60", "--format", "json", "-")
    _stamp(p.stamp)
    time.sleep(0.3)
    p.signal(signal.SIGTERM)
    code, out, err, _ = p.wait()
    import json

    report = json.loads(out)
    assert (code, report["verdict"]["category"]) == (1, VERDICT), err
    assert any("reading stopped at SIGTERM" in n for n in report["notices"])
    _clean(err)


def test_a_second_ctrl_c_quits_at_once(pipeline: Any) -> None:
    p = pipeline("--grace", "60", "-")
    _stamp(p.stamp)
    time.sleep(0.3)
    p.signal(signal.SIGINT)
    time.sleep(0.02)
    p.signal(signal.SIGINT)
    code, out, err, _ = p.wait()
    assert (code, out) == (130, "")
    assert err.endswith("oomdoctor: interrupted\n"), err
    _clean(err)


def test_ctrl_c_before_any_line_is_exit_130(tmp_path: Path) -> None:
    silent = [
        sys.executable,
        "-c",
        "import signal, time\nsignal.signal(2, signal.SIG_IGN)\ntime.sleep(99)",
    ]
    p = Pipeline(tmp_path, ["--follow", "-"], server=silent)
    try:
        time.sleep(1.5)  # oomdoctor is up and waiting (a signal before that is 130 as well)
        p.signal(signal.SIGINT)
        code, out, err, _ = p.wait()
    finally:
        p.close()
    assert (code, out) == (130, "")
    assert err.splitlines()[-1] in (
        "oomdoctor: interrupted before anything was read",
        "oomdoctor: interrupted",
    )


# -- the end of the input, and --grace ------------------------------------------------------------


def test_the_end_of_the_input_reports_at_once(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*OOMDOCTOR, "diagnose", "--no-gpu", "--grace", "60", "-"],
        stdin=subprocess.Popen(["cat", str(LOG)], stdout=subprocess.PIPE).stdout,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=REPO,
        env=_env(),
    )
    assert (proc.returncode, proc.stdout.split("  ")[0]) == (1, VERDICT), proc.stderr
    assert "still open" not in proc.stdout and "reading stopped" not in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("follow", [[], ["--follow"]], ids=["dash", "follow-dash"])
def test_a_hung_server_is_reported_grace_seconds_after_its_crash(
    pipeline: Any, follow: list[str]
) -> None:
    p = pipeline(*follow, "--grace", str(GRACE), "-")
    crashed = _stamp(p.stamp)
    code, out, err, ended = p.wait()
    assert GRACE <= ended - crashed < GRACE + SLACK_S
    assert (code, out.split("  ")[0]) == (1, VERDICT), err
    assert "still open 0.5 s after the crash line" in " ".join(out.split())
    _clean(err)


def _read_of(pid: int, path: Path) -> int:
    """How far process ``pid`` has read the file ``path`` (-1: it has not opened it)."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if fd.readlink() == path:
                info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
                return int(info.split("pos:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return -1


@pytest.mark.parametrize("whole", [True, False], ids=["tail-n+1-F", "tail-F"])
def test_tail_F_into_follow_reports_within_grace(tmp_path: Path, whole: bool) -> None:
    """`tail -F LOG | oomdoctor diagnose --follow -`: tail never ends, the grace does. Plain
    `tail -F` starts at the last 10 lines; the crash is still reported."""
    head, rest = _split()
    log = tmp_path / "server.log"
    log.write_bytes(head)
    shown = head if whole else b"\n".join(head.split(b"\n")[-11:])  # the last 10 lines
    r, w = os.pipe()
    tail_args = ["-n", "+1", "-F"] if whole else ["-F"]
    tail = subprocess.Popen(["tail", *tail_args, str(log)], stdout=w, **_in_group(0))
    os.close(w)
    doctor = None
    try:
        _until(lambda: _unread(r) == len(shown), "tail's copy of the head")
        doctor = subprocess.Popen(
            [*OOMDOCTOR, "diagnose", "--no-gpu", "--follow", "--grace", str(GRACE), "-"],
            stdin=r,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=_env(),
            **_in_group(tail.pid),
        )
        _until(lambda: _unread(r) == 0, "oomdoctor reading the pipe")
        with log.open("ab") as f:
            f.write(rest)
        appended = time.time()
        out, err = doctor.communicate(timeout=WAIT_S)
        ended = time.time()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tail.pid, signal.SIGKILL)
        tail.wait(WAIT_S)
        os.close(r)
    assert doctor.returncode == 1, err
    assert out.startswith(VERDICT)
    assert GRACE <= ended - appended < GRACE + SLACK_S
    _clean(err)


class Follower:
    """``oomdoctor diagnose --follow LOG`` in a process group of its own."""

    def __init__(self, log: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*OOMDOCTOR, "diagnose", "--no-gpu", "--follow", *args, str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=_env(),
            start_new_session=True,
        )
        self.log = log

    def read_to(self, size: int) -> None:
        _until(lambda: _read_of(self.proc.pid, self.log) == size, f"oomdoctor at byte {size}")

    def finish(self) -> tuple[int, str, str, float]:
        try:
            out, err = self.proc.communicate(timeout=WAIT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode, out, err, time.time()


@linux_proc
def test_follow_file_reports_within_grace(tmp_path: Path) -> None:
    head, rest = _split()
    log = tmp_path / "server.log"
    log.write_bytes(head)
    f = Follower(log, "--grace", str(GRACE))
    f.read_to(len(head))
    with log.open("ab") as out:
        out.write(rest)
    appended = time.time()
    code, out_text, err, ended = f.finish()
    assert (code, out_text.split("  ")[0]) == (1, VERDICT), err
    assert GRACE <= ended - appended < GRACE + SLACK_S
    assert f"{LINES} lines read" in out_text
    _clean(err)


@linux_proc
def test_follow_file_goes_on_in_the_rotated_file(tmp_path: Path) -> None:
    head, rest = _split()
    log = tmp_path / "server.log"
    log.write_bytes(head)
    f = Follower(log, "--grace", str(GRACE))
    f.read_to(len(head))
    log.rename(tmp_path / "server.log.1")  # logrotate: rename, then a new file
    log.write_bytes(rest)
    code, out, err, _ = f.finish()
    assert (code, out.split("  ")[0]) == (1, VERDICT), err
    said = " ".join(out.split())
    assert "server.log: replaced (rotated) after line 24" in said
    assert f"{LINES} lines read" in said  # both files, once each
    _clean(err)


@linux_proc
def test_follow_file_reads_a_truncated_file_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    junk = b"".join(b"[2025-09-22 08:00:00] health check ok\n" for _ in range(50))
    log.write_bytes(junk)
    f = Follower(log, "--grace", str(GRACE))
    f.read_to(len(junk))
    with log.open("r+b") as out:  # copytruncate: the file is cut, then written again
        out.truncate(0)
        out.write(LOG.read_bytes())
    code, text, err, _ = f.finish()
    assert (code, text.split("  ")[0]) == (1, VERDICT), err
    assert "server.log: truncated after line 50" in " ".join(text.split())
    _clean(err)


@linux_proc
def test_follow_file_ctrl_c_reports(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(LOG.read_bytes())
    f = Follower(log, "--grace", "60")
    f.read_to(log.stat().st_size)
    os.killpg(f.proc.pid, signal.SIGINT)
    code, out, err, _ = f.finish()
    assert (code, out.split("  ")[0]) == (1, VERDICT), err
    _clean(err)


# -- refused before anything is read --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["a.log", "b.log"],
            2,
            "oomdoctor: --follow reads one input: standard input (-) or one LOG",
        ),
        (["missing.log"], 3, "oomdoctor: missing.log: no such file"),
        (["."], 3, "oomdoctor: .: is a directory"),
        (
            ["/dev/null"],
            3,
            "oomdoctor: /dev/null: not a regular file: --follow FILE follows a log file",
        ),
    ],
)
def test_follow_file_refusals(args: list[str], code: int, message: str) -> None:
    proc = subprocess.run(
        [*OOMDOCTOR, "diagnose", "--no-gpu", "--follow", *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=REPO,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )
    assert (proc.returncode, proc.stdout) == (code, "")
    assert proc.stderr.splitlines()[0] == message


def test_follow_refuses_a_compressed_file(tmp_path: Path) -> None:
    import gzip

    log = tmp_path / "server.log.gz"
    log.write_bytes(gzip.compress(LOG.read_bytes()))
    proc = subprocess.run(
        [*OOMDOCTOR, "diagnose", "--no-gpu", "--follow", str(log)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=REPO,
        env=_env(),
    )
    assert (proc.returncode, proc.stdout) == (3, "")
    assert "compressed or UTF-16/32" in proc.stderr
    assert f"oomdoctor diagnose {log}" in proc.stderr


def test_a_followed_file_is_read_to_its_end_before_the_new_one(tmp_path: Path) -> None:
    """The writer may add to the old file after the rename: that comes first, then the new file
    from its start; the switch is told once."""
    from oomdoctor.cli.live_sources import FollowedFile

    log = tmp_path / "server.log"
    log.write_bytes(b"one\n")
    events: list[str] = []
    followed = FollowedFile(str(log), events.append)
    try:
        assert followed.read(100, 0) == b"one\n"
        assert followed.read(100, 0) is None
        log.rename(tmp_path / "server.log.1")
        log.write_bytes(b"three\n")
        with (tmp_path / "server.log.1").open("ab") as old:
            old.write(b"two\n")
        assert followed.read(100, 0) == b"two\n"
        assert events == []
        assert followed.read(100, 0) == b"three\n"
        assert events == ["replaced"]
        log.write_bytes(b"3333333\n")  # cut, and written past the position, between two looks
        assert followed.read(100, 0) == b"3333333\n"
        assert events == ["replaced", "truncated"]
    finally:
        followed.close()
