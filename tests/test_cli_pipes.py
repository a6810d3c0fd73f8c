"""Files and pipes (issue 14, items 4 and 7): closed and full streams, broken pipes, `-o` written
whole and never over an input, `watch` when its copy or report cannot be written, `rules test` with
a relative DIR. Real processes with real file descriptors; exit code and stderr checked together."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.cli import streams
from tests.conftest import FIXTURES, REPO

Y070 = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"
HEALTHY = FIXTURES / "sglang-0.5.23" / "healthy-startup.log"
FAKE = str(REPO / "tests" / "fake_server.py")
OOMDOCTOR = [sys.executable, "-m", "oomdoctor"]
needs_dev_full = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "fakes"), env.get("PYTHONPATH", "")])
    env["OOMDOCTOR_NVML_PRECHECK"] = "0"
    env.pop("FORCE_COLOR", None)
    return env


def _run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("cwd", REPO)
    return subprocess.run(
        [*OOMDOCTOR, *args], text=True, timeout=120, env=_env(), check=False, **kwargs
    )


def _shell(script: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``script`` with $0 = python and "$@" = args (for `>&-` and `<&-`)."""
    return subprocess.run(
        ["sh", "-c", script, sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=REPO,
        check=False,
        **kwargs,
    )


def _clean(stderr: str, server_output: bool = False) -> None:
    """No traceback of oomdoctor's (the fake server's log has tracebacks of its own)."""
    assert server_output or "Traceback" not in stderr
    assert "Exception ignored" not in stderr
    assert "internal error" not in stderr


def _gone_reader() -> int:
    """The write end of a pipe whose reader already went away: every write is EPIPE."""
    r, w = os.pipe()
    os.close(r)
    return w


# -- closed and full standard streams -------------------------------------------------------------


def test_closed_stdout_is_a_one_line_error() -> None:
    proc = _shell('exec "$0" -m oomdoctor diagnose --no-gpu "$@" >&-', str(Y070))
    assert proc.returncode == 3
    assert proc.stderr == (
        "oomdoctor: cannot write the report: standard output is closed\nhint: give -o FILE\n"
    )


def test_closed_stdout_with_o_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    proc = _shell('exec "$0" -m oomdoctor diagnose --no-gpu "$@" >&-', str(Y070), "-o", str(out))
    assert (proc.returncode, proc.stderr) == (1, "")
    assert out.read_text().startswith("startup_kv_alloc")


@pytest.mark.parametrize("args", [["-"], []], ids=["dash", "no-log"])
def test_closed_stdin_is_a_one_line_error(args: list[str]) -> None:
    proc = _shell('exec "$0" -m oomdoctor diagnose --no-gpu "$@" <&-', *args)
    assert proc.returncode == 3
    assert proc.stderr == (
        "oomdoctor: cannot read standard input: it is closed\n"
        "hint: give a log file, or pipe the server's output in\n"
    )
    assert proc.stdout == ""


def test_closed_stdin_does_not_matter_for_a_file() -> None:
    proc = _shell('exec "$0" -m oomdoctor diagnose --no-gpu "$@" <&-', str(Y070))
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.startswith("startup_kv_alloc")


@needs_dev_full
def test_stdout_to_dev_full_is_a_one_line_error() -> None:
    with Path("/dev/full").open("w") as full:
        proc = _run("diagnose", "--no-gpu", str(Y070), stdout=full)
    assert proc.returncode == 3
    assert proc.stderr == "oomdoctor: cannot write to standard output: No space left on device\n"


@needs_dev_full
def test_o_dev_full_is_a_one_line_error() -> None:
    proc = _run("diagnose", "--no-gpu", str(Y070), "-o", "/dev/full")
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr == "oomdoctor: cannot write /dev/full: No space left on device\n"


@needs_dev_full
def test_stdout_and_stderr_to_dev_full_still_exit_3() -> None:
    with Path("/dev/full").open("w") as full:
        proc = _run("diagnose", "--no-gpu", str(Y070), stdout=full, stderr=full)
    assert proc.returncode == 3


def test_stdout_and_stderr_closed_still_exit_3() -> None:
    proc = _shell('exec "$0" -m oomdoctor diagnose --no-gpu "$@" >&- 2>&-', str(Y070))
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", "")


@needs_dev_full
def test_other_commands_to_dev_full_exit_3() -> None:
    with Path("/dev/full").open("w") as full:
        listed = _run("rules", "list", stdout=full)
        planned = _run("plan", "--gpu", "H100", "--weights", "60GiB", stdout=full)
    for proc in (listed, planned):
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr == (
            "oomdoctor: cannot write to standard output: No space left on device\n"
        )


# -- broken pipes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "status"),
    [
        ([str(Y070)], 1),
        ([str(Y070), "--exit-zero"], 0),
        ([str(Y070), "--format", "json"], 1),
        ([str(Y070), "--format", "markdown"], 1),
        ([str(HEALTHY)], 0),
    ],
    ids=["oom", "exit-zero", "json", "markdown", "healthy"],
)
def test_broken_pipe_exits_quietly_with_the_verdict(args: list[str], status: int) -> None:
    w = _gone_reader()
    try:
        proc = _run("diagnose", "--no-gpu", *args, stdout=w)
    finally:
        os.close(w)
    assert (proc.returncode, proc.stderr) == (status, "")


def test_real_head_gets_one_line_and_the_verdict_stays() -> None:
    first = subprocess.Popen(
        [*OOMDOCTOR, "diagnose", "--no-gpu", str(Y070)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    )
    head = subprocess.run(["head", "-1"], stdin=first.stdout, capture_output=True, timeout=120)
    assert first.stdout is not None and first.stderr is not None
    first.stdout.close()
    err = first.stderr.read().decode()
    first.stderr.close()
    assert first.wait(120) == 1
    assert err == ""
    assert head.stdout.decode().startswith("startup_kv_alloc")


def test_broken_pipe_in_list_commands_is_status_0() -> None:
    w = _gone_reader()
    try:
        listed = _run("rules", "list", stdout=w)
        helped = _run("--help", stdout=w)
    finally:
        os.close(w)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert (helped.returncode, helped.stderr) == (0, "")


def _big_input(tmp_path: Path) -> Path:
    """The y070 crash, then 3 MB of other lines: more than any pipe holds."""
    big = tmp_path / "big.log"
    filler = ("x" * 199 + "\n") * 15_000
    big.write_text(Y070.read_text() + filler)
    return big


def test_follow_tee_into_head_still_reports_on_stderr(tmp_path: Path) -> None:
    with _big_input(tmp_path).open("rb") as source:
        first = subprocess.Popen(
            [*OOMDOCTOR, "diagnose", "--no-gpu", "--follow", "--tee"],
            stdin=source,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=REPO,
        )
        assert first.stdout is not None and first.stderr is not None
        head = subprocess.run(["head", "-1"], stdin=first.stdout, capture_output=True, timeout=120)
        first.stdout.close()
        err = first.stderr.read().decode()
        first.stderr.close()
        status = first.wait(120)
    assert status == 1
    assert err.startswith("startup_kv_alloc"), err[:300]
    assert "warning" not in err
    _clean(err)
    assert head.stdout.startswith(b"[2025-09-22 08:14:03] server_args=")


@needs_dev_full
def test_follow_tee_to_dev_full_warns_once_and_reports(tmp_path: Path) -> None:
    with _big_input(tmp_path).open("rb") as source, Path("/dev/full").open("w") as full:
        proc = _run("diagnose", "--no-gpu", "--follow", "--tee", stdin=source, stdout=full)
    assert proc.returncode == 1
    first, *rest = proc.stderr.splitlines()
    assert first == (
        "oomdoctor: warning: cannot copy the input to standard output: No space left on device; "
        "reading on without the copy (--tee)"
    )
    assert rest[0].startswith("startup_kv_alloc")
    assert proc.stderr.count("oomdoctor: warning") == 1


# -- -o: written whole, never over an input -------------------------------------------------------


def test_o_replaces_the_file_and_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    out.write_text("old report, longer than nothing\n" * 1000)
    out.chmod(0o640)
    proc = _run("diagnose", "--no-gpu", str(Y070), "--format", "markdown", "-o", str(out))
    assert (proc.returncode, proc.stderr, proc.stdout) == (1, "", "")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert "old report" not in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]  # no temporary file left


def test_o_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    os.umask(mask)
    out = tmp_path / "report.json"
    proc = _run("diagnose", "--no-gpu", str(Y070), "--format", "json", "-o", str(out))
    assert (proc.returncode, proc.stderr) == (1, "")
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


def test_o_through_a_symlink_replaces_the_target(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    proc = _run("diagnose", "--no-gpu", str(Y070), "-o", str(link))
    assert (proc.returncode, proc.stderr) == (1, "")
    assert link.is_symlink()
    assert target.read_text().startswith("startup_kv_alloc")


def test_o_into_a_missing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "report.txt"
    proc = _run("diagnose", "--no-gpu", str(Y070), "-o", str(out))
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr == f"oomdoctor: cannot write {out}: No such file or directory\n"


def test_o_onto_a_directory_is_a_one_line_error(tmp_path: Path) -> None:
    proc = _run("diagnose", "--no-gpu", str(Y070), "-o", str(tmp_path))
    assert proc.returncode == 3
    assert proc.stderr == f"oomdoctor: cannot write {tmp_path}: it is a directory\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "report.txt"
    out.write_text("the old report\n")

    def refuse(self: Path, target: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", refuse)
    with pytest.raises(streams.OutputError, match=r"cannot write .*: No space left on device"):
        streams.write_file(str(out), "the new report\n")
    assert out.read_text() == "the old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_concurrent_writers_never_splice(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    texts = [chr(ord("a") + i) * (1 << 20) + "\n" for i in range(8)]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            for _ in range(5):
                streams.write_file(str(out), text)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert out.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_concurrent_runs_leave_one_whole_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    runs = [
        [str(Y070), "--format", "json"],
        [str(Y085), "--format", "markdown"],
        [str(HEALTHY), "--format", "text"],
    ] * 2
    procs = [
        subprocess.Popen(
            [*OOMDOCTOR, "diagnose", "--no-gpu", *args, "-o", str(out)],
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=REPO,
        )
        for args in runs
    ]
    for proc in procs:
        proc.wait(120)
        assert proc.stderr is not None
        assert proc.stderr.read() == b""
        proc.stderr.close()
    wholes = set()
    for args in runs[:3]:
        single = tmp_path / "single"
        _run("diagnose", "--no-gpu", *args, "-o", str(single))
        wholes.add(single.read_text())
        single.unlink()
    assert out.read_text() in wholes
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


@pytest.mark.parametrize(
    "spelling", ["same", "relative", "dotted", "symlink"], ids=lambda s: str(s)
)
def test_o_refuses_to_overwrite_the_input(tmp_path: Path, spelling: str) -> None:
    log = tmp_path / "a.log"
    shutil.copy(Y070, log)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.log").symlink_to(log)
    output = {
        "same": str(log),
        "relative": "a.log",
        "dotted": "sub/../a.log",
        "symlink": "link.log",
    }[spelling]
    proc = _run("diagnose", "--no-gpu", str(log), "-o", output, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"oomdoctor: -o {output} is also an input: refusing to overwrite it\n"
        "hint: give -o another file name\n"
    )
    assert log.read_bytes() == Y070.read_bytes()


def test_svg_refuses_to_overwrite_the_input_or_the_report(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    shutil.copy(Y070, log)
    over_log = _run("diagnose", "--no-gpu", str(log), "--svg", str(log))
    over_report = _run(
        "diagnose", "--no-gpu", str(log), "-o", "r.txt", "--svg", "r.txt", cwd=tmp_path
    )
    assert over_log.returncode == 2
    assert over_log.stderr.startswith(f"oomdoctor: --svg {log} is also an input: refusing")
    assert over_report.returncode == 2
    assert over_report.stderr.startswith("oomdoctor: --svg r.txt is also the -o file: refusing")
    assert log.read_bytes() == Y070.read_bytes()
    assert not (tmp_path / "r.txt").exists()


def test_error_messages_redact_the_file_name(tmp_path: Path) -> None:
    secret = "hf_" + "Ab3" * 10
    missing = tmp_path / f"{secret}.log"
    proc = _run("diagnose", "--no-gpu", str(missing))
    assert proc.returncode == 3
    assert proc.stderr.startswith("oomdoctor: ")
    assert secret not in proc.stderr
    unwritable = tmp_path / f"no-dir-{secret}" / "r.txt"
    proc = _run("diagnose", "--no-gpu", "--no-redact", str(Y070), "-o", str(unwritable))
    assert proc.returncode == 3
    assert secret not in proc.stderr and proc.stderr.startswith("oomdoctor: cannot write ")


# -- watch ----------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _direct(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, FAKE, *args], capture_output=True, timeout=120)


def _watch(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("cwd", REPO)
    return subprocess.run(
        [*OOMDOCTOR, "watch", "--no-gpu", *args],
        timeout=120,
        env=_env(),
        check=False,
        **kwargs,
    )


@needs_dev_full
def test_watch_log_to_dev_full_passes_through_and_mirrors_the_status(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    direct = _direct(str(Y085))
    proc = _watch(
        "--log", "/dev/full", "--", sys.executable, FAKE, str(Y085), "--pidfile", str(pidfile)
    )
    assert proc.returncode == direct.returncode == 1
    assert proc.stdout == direct.stdout
    err = proc.stderr.decode()
    warning = (
        "oomdoctor: warning: cannot write the server's output to /dev/full: "
        "No space left on device; passing it through without the copy\n"
    )
    assert err.count("oomdoctor: warning") == 1 and warning in err
    assert err.replace(warning, "").startswith(direct.stderr.decode())
    assert "\n-- oomdoctor --\nruntime_activation" in err
    _clean(err, server_output=True)
    assert _gone(int(pidfile.read_text()))


@needs_dev_full
@pytest.mark.parametrize(("mode", "status"), [("crash", 1), ("clean", 0), ("signal", 137)])
def test_watch_o_to_dev_full_still_exits_with_the_server_status(mode: str, status: int) -> None:
    proc = _watch(
        "--always", "-o", "/dev/full", "--", sys.executable, FAKE, str(Y085), "--mode", mode
    )
    assert proc.returncode == status
    err = proc.stderr.decode()
    assert err.count("oomdoctor: warning") == 1
    assert "oomdoctor: warning: cannot write /dev/full: No space left on device\n" in err
    assert "\n-- oomdoctor --\n" in err
    _clean(err, server_output=True)


def test_watch_o_into_a_missing_folder_warns_and_mirrors_the_status(tmp_path: Path) -> None:
    report = tmp_path / "missing" / "r.md"
    proc = _watch("-o", str(report), "--", sys.executable, FAKE, str(Y085))
    assert proc.returncode == 1
    assert (
        f"oomdoctor: warning: cannot write {report}: No such file or directory\n"
        in proc.stderr.decode()
    )


def test_watch_refuses_a_report_over_its_log(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    proc = _watch(
        "--log", "s.log", "-o", "./s.log", "--", sys.executable, FAKE, str(Y085),
        "--pidfile", str(pidfile),
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        "oomdoctor: -o ./s.log is also the --log file: refusing to overwrite it\n"
        "hint: give -o another file name\n"
    )
    assert not pidfile.exists()  # the server never started


def test_watch_with_stdout_closed_still_copies_the_log_once(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    direct = _direct(str(Y085))
    proc = subprocess.run(
        ["sh", "-c", 'exec "$0" -m oomdoctor watch --no-gpu "$@" >&-', sys.executable,
         "--log", str(log), "--", sys.executable, FAKE, str(Y085)],
        capture_output=True,
        timeout=120,
        env=_env(),
        cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "\n-- oomdoctor --\n" in proc.stderr.decode()
    assert "oomdoctor: warning" not in proc.stderr.decode()
    # fd 1 was closed: had the log file taken its number, the copy would be there twice
    assert len(log.read_bytes()) == len(direct.stdout) + len(direct.stderr)


def test_watch_never_orphans_the_server_on_an_internal_error(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = (
        "import sys\n"
        "from oomdoctor.incident import live\n"
        "calls = []\n"
        "real = live.StreamParser.feed\n"
        "def feed(self, *a, **k):\n"
        "    calls.append(1)\n"
        "    if len(calls) > 3:\n"
        "        raise ZeroDivisionError('planted bug')\n"
        "    return real(self, *a, **k)\n"
        "live.StreamParser.feed = feed\n"
        "from oomdoctor.cli import main\n"
        f"sys.argv = ['oomdoctor', 'watch', '--no-gpu', '--', {sys.executable!r}, {FAKE!r},"
        f" {str(Y085)!r}, '--delay', '0.2', '--mode', 'hang', '--pidfile', {str(pidfile)!r}]\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert proc.returncode == 70
    assert "oomdoctor: internal error: ZeroDivisionError: planted bug" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _gone(int(pidfile.read_text()))


# -- rules test DIR -------------------------------------------------------------------------------


def _failing_rule_dir(root: Path) -> Path:
    """A rule whose `fire` fixture (relative to the rule file, inside its directory, as a
    --rules rule's fixtures must be) does not make it fire; ``root/fixtures`` is a directory
    to run from."""
    (root / "fixtures").mkdir()
    rule_dir = root / "myrules"
    fixtures = rule_dir / "fixtures"
    fixtures.mkdir(parents=True)
    shutil.copy(FIXTURES / "vllm-0.32.0" / "alloc-retry-then-oom.log", fixtures / "then-oom.log")
    text = (REPO / "rules" / "allocator-retry.toml").read_text()
    head, _, _ = text.partition("[fixtures]")
    head = head.replace('id = "allocator-retry"', 'id = "my-retry"')
    (rule_dir / "my-retry.toml").write_text(
        head + '[fixtures]\nfire = ["fixtures/then-oom.log"]\nsilent = ["fixtures/then-oom.log"]\n'
    )
    return rule_dir


@pytest.mark.parametrize(
    ("cwd", "spelling"),
    [(".", "myrules"), (".", "./myrules/"), ("fixtures", "../myrules"), (".", "ABSOLUTE")],
)
def test_rules_test_relative_dir_reports_the_failure(
    tmp_path: Path, cwd: str, spelling: str
) -> None:
    rule_dir = _failing_rule_dir(tmp_path)
    arg = str(rule_dir) if spelling == "ABSOLUTE" else spelling
    proc = _run("rules", "test", arg, cwd=tmp_path / cwd)
    assert (proc.returncode, proc.stderr) == (1, "")
    lines = proc.stdout.splitlines()
    fixture = rule_dir / "fixtures" / "then-oom.log"
    assert lines[0].split() == ["FAIL", "my-retry", "fire", str(fixture)]
    assert lines[1].strip().startswith("did not fire")
    assert lines[2].split() == ["ok", "my-retry", "silent", str(fixture)]
    assert lines[-1] == "1 failure(s)"
    assert len(lines) == 4  # DIR's rules only


def test_rules_test_dir_without_rules_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "markers").mkdir()
    (tmp_path / "markers" / "engine-markers.toml").write_text("")
    proc = _run("rules", "test", "markers", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr.startswith("oomdoctor: markers: no rules to test")
    assert "0 failure(s)" not in proc.stdout
    empty = _run("rules", "test", "nothing-here", cwd=tmp_path)
    assert empty.returncode == 3
    assert "nothing-here: not a directory of rule files" in empty.stderr


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anything")
def test_o_onto_a_read_only_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    out.write_text("kept\n")
    out.chmod(0o444)
    proc = _run("diagnose", "--no-gpu", str(Y070), "-o", str(out))
    assert proc.returncode == 3
    assert proc.stderr == f"oomdoctor: cannot write {out}: Permission denied\n"
    assert out.read_text() == "kept\n"
