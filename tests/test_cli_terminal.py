"""The command line at the terminal: --color and the colour environment, empty input, files of
different incidents, watch's report while the server still runs, shell completion. Exit code and
stderr are checked together."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES, REPO

Y070 = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"
TP2 = FIXTURES / "sglang-0.5.10" / "watchdog-after-oom-tp2.log"
TP2_0523 = FIXTURES / "sglang-0.5.23" / "startup-kv-loaded-weights-tp2.log"
TP4 = FIXTURES / "sglang-0.5.10" / "startup-kv-current-value-tp4-compose.log"
VLLM_RUNTIME = FIXTURES / "vllm-0.10.1" / "runtime-forward-oom.log"
VLLM_STARTUP = FIXTURES / "vllm-0.10.1" / "startup-no-kv-memory.log"
SGLANG_RUNTIME = FIXTURES / "sglang-0.5.10" / "runtime-prefill-oom.log"
FAKE = str(REPO / "tests" / "fake_server.py")
ESC = "\x1b["
#: The colour variables, cleared so that the runner's own environment does not decide.
NO_COLOUR_ENV: dict[str, str | None] = {"NO_COLOR": None, "FORCE_COLOR": None, "TERM": None}


def run(
    *args: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=input, env={**NO_COLOUR_ENV, **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NO_COLOUR_ENV}
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "fakes"), env.get("PYTHONPATH", "")])
    env["OOMDOCTOR_NVML_PRECHECK"] = "0"  # the fake pynvml needs no driver library
    return env


# -- --color ----------------------------------------------------------------------------------


def test_color_always_colours_a_pipe_but_never_a_file(tmp_path: Path) -> None:
    code, out, err = run("diagnose", str(Y070), "--no-gpu", "--color", "always")
    assert code == 1 and err == ""
    assert f"{ESC}1;31mstartup_kv_alloc" in out
    report = tmp_path / "report.txt"
    code, out, err = run("diagnose", str(Y070), "--no-gpu", "--color", "always", "-o", str(report))
    assert code == 1 and out == "" and err == ""
    text = report.read_text()
    assert "startup_kv_alloc" in text and "\x1b" not in text


@pytest.mark.parametrize(
    ("flags", "env", "coloured"),
    [
        ((), {}, False),  # auto, and the CliRunner's stdout is no terminal
        ((), {"FORCE_COLOR": "1"}, True),
        ((), {"FORCE_COLOR": "0"}, False),
        ((), {"FORCE_COLOR": ""}, False),
        ((), {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
        ((), {"FORCE_COLOR": "1", "NO_COLOR": ""}, True),  # an empty NO_COLOR does not count
        ((), {"FORCE_COLOR": "1", "TERM": "dumb"}, True),
        (("--color", "never"), {"FORCE_COLOR": "1"}, False),
        (("--color", "always"), {"NO_COLOR": "1", "TERM": "dumb"}, True),
        (("--color", "auto"), {"FORCE_COLOR": "yes"}, True),
    ],
)
def test_color_choice_and_environment_through_a_pipe(
    flags: tuple[str, ...], env: dict[str, str], coloured: bool
) -> None:
    code, out, err = run("diagnose", str(Y070), "--no-gpu", *flags, env=env)
    assert code == 1 and err == ""
    assert "startup_kv_alloc" in out
    assert (ESC in out) is coloured


def test_color_is_refused_outside_its_choices() -> None:
    code, out, err = run("diagnose", str(Y070), "--no-gpu", "--color", "sometimes")
    assert code == 2 and out == ""
    assert "'sometimes' is not one of 'auto', 'always', 'never'" in err


def test_markdown_and_json_get_no_colour_even_when_forced() -> None:
    code, out, err = run("diagnose", str(Y070), "--no-gpu", "--format", "json", "--color", "always")
    assert code == 1 and err == ""
    assert json.loads(out)["verdict"]["category"] == "startup_kv_alloc"
    code, out, err = run(
        "diagnose", str(Y070), "--no-gpu", "--format", "markdown", "--color", "always"
    )
    assert code == 1 and err == "" and "\x1b" not in out


def _on_a_terminal(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run oomdoctor with its stdout on a pseudo-terminal; return the code, stdout, stderr."""
    leader, follower = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "oomdoctor", *args],
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                data = os.read(leader, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return code, b"".join(chunks).decode(), err


@pytest.mark.parametrize(
    ("flags", "env", "coloured"),
    [
        ((), {}, True),
        ((), {"NO_COLOR": "1"}, False),
        ((), {"TERM": "dumb"}, False),
        (("--color", "never"), {}, False),
        (("--color", "always"), {"NO_COLOR": "1"}, True),
    ],
)
def test_color_auto_on_a_terminal(
    flags: tuple[str, ...], env: dict[str, str], coloured: bool
) -> None:
    code, out, err = _on_a_terminal("diagnose", str(Y070), "--no-gpu", *flags, env=_env(**env))
    assert code == 1 and err == ""
    assert "startup_kv_alloc" in out
    assert (ESC in out) is coloured


@pytest.mark.parametrize(
    ("flags", "env", "coloured"),
    [(("--color", "always"), {}, True), (("--color", "never"), {"FORCE_COLOR": "1"}, False)],
)
def test_watch_colours_its_stderr_report_as_asked(
    tmp_path: Path, flags: tuple[str, ...], env: dict[str, str], coloured: bool
) -> None:
    report = tmp_path / "report.txt"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomdoctor",
            "watch",
            "--no-gpu",
            *flags,
            "-o",
            str(report),
            "--",
            sys.executable,
            FAKE,
            str(Y085),
            "--mode",
            "crash",
        ],
        capture_output=True,
        env=_env(**env),
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 1
    err = proc.stderr.decode()
    summary = err[err.index("-- oomdoctor --") :]
    assert "runtime_activation" in summary
    assert (ESC in summary) is coloured
    assert "\x1b" not in report.read_text()  # the -o file never


# -- empty input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"  \n\t\n\r\n", b"\xef\xbb\xbf\n\n", gzip.compress(b""), gzip.compress(b"\n \n")],
    ids=["0-bytes", "newline", "whitespace", "bom", "gzip-empty", "gzip-blank"],
)
def test_an_empty_file_is_a_one_line_error(tmp_path: Path, content: bytes) -> None:
    log = tmp_path / "empty.log"
    log.write_bytes(content)
    code, out, err = run("diagnose", str(log), "--no-gpu")
    assert code == 3 and out == ""
    assert err == f"oomdoctor: {log} is empty: nothing to diagnose\n"
    code, _, err = run("diagnose", str(log), "--no-gpu", "--exit-zero", "--format", "json")
    assert code == 3 and err.startswith("oomdoctor: ")


@pytest.mark.parametrize(
    ("args", "data"),
    [(("-",), b""), (("-",), b"\n  \n"), ((), b"\n"), (("-",), gzip.compress(b""))],
    ids=["dash-0-bytes", "dash-blank", "implicit-stdin", "gzip-empty"],
)
def test_empty_standard_input_is_a_one_line_error(args: tuple[str, ...], data: bytes) -> None:
    code, out, err = run("diagnose", *args, "--no-gpu", input=data)
    assert code == 3 and out == ""
    assert err == "oomdoctor: standard input is empty: nothing to diagnose\n"


def test_follow_of_an_empty_pipe_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "diagnose", "--follow", "--no-gpu"],
        input=b"\n\n",
        capture_output=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 3 and proc.stdout == b""
    assert proc.stderr == b"oomdoctor: standard input is empty: nothing to diagnose\n"


def test_all_inputs_empty_names_them_all(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"")
    b.write_bytes(b"\n\n")
    code, out, err = run("diagnose", str(a), str(b), "--no-gpu")
    assert code == 3 and out == ""
    assert err == f"oomdoctor: {a} and {b} are empty: nothing to diagnose\n"
    code, out, err = run("diagnose", str(a), "-", "--no-gpu", input=b" \n")
    assert code == 3 and out == ""
    assert err == f"oomdoctor: {a} and standard input are empty: nothing to diagnose\n"


def test_a_missing_file_beats_an_empty_one(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    code, _, err = run("diagnose", str(empty), str(tmp_path / "gone.log"), "--no-gpu")
    assert code == 3
    assert err.splitlines()[0] == f"oomdoctor: {tmp_path / 'gone.log'}: no such file"


@pytest.mark.parametrize("content", [b"", b"\n \n"], ids=["0-bytes", "blank"])
def test_one_empty_input_among_others_is_a_notice(tmp_path: Path, content: bytes) -> None:
    empty = tmp_path / "rank1.log"
    empty.write_bytes(content)
    code, out, err = run("diagnose", str(Y070), str(empty), "--no-gpu", "--format", "json")
    assert code == 1 and err == ""
    rep = json.loads(out)
    assert rep["verdict"]["category"] == "startup_kv_alloc"
    assert rep["notices"].count(f"{empty}: the input is empty") == 1
    code, out, err = run("diagnose", str(empty), "-", "--no-gpu", input=Y070.read_bytes())
    assert code == 1 and err == ""
    assert f"{empty}: the input is empty" in out


def test_an_empty_input_with_an_undecodable_name_is_noticed_once(tmp_path: Path) -> None:
    """The notice names the file as every report does (``\\xff``), so the CLI finds the
    pipeline's own notice instead of adding a second one under the raw name."""
    empty = Path(os.fsdecode(bytes(tmp_path) + b"/rank1-\xff.log"))
    empty.write_bytes(b"")
    code, out, err = run("diagnose", str(Y070), str(empty), "--no-gpu", "--format", "json")
    assert code == 1 and err == ""
    notices = json.loads(out)["notices"]
    assert [n for n in notices if "the input is empty" in n] == [
        f"{tmp_path}/rank1-\\xff.log: the input is empty"
    ]


# -- several files, different incidents -------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "what"),
    [
        (Y070, TP2, "model /models/OLMo-2-0325-32B-Instruct vs meta-llama/Llama-3.1-70B-Instruct"),
        (Y070, TP2, "version SGLang 0.4.6–0.5.2 vs SGLang 0.5.10"),
        (Y070, TP2, "started 2025-09-22 08:14:03 vs 2026-01-20 22:14:03"),
        (Y070, Y085, "--mem-fraction-static 0.7 vs 0.85"),
        (VLLM_RUNTIME, SGLANG_RUNTIME, "engine vllm vs sglang"),
        (VLLM_RUNTIME, VLLM_STARTUP, "started 09-03 14:02:14 vs 08-28 16:41:10"),
    ],
)
def test_files_of_different_incidents_get_a_warning(a: Path, b: Path, what: str) -> None:
    code, out, err = run("diagnose", str(a), str(b), "--no-gpu", "--format", "json")
    assert code in (0, 1)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"oomdoctor: warning: {a} and {b} look like different incidents (")
    assert lines[0].endswith("); diagnosing them together")
    assert what in lines[0]
    notices = json.loads(out)["notices"]
    assert any(
        n.startswith(f"{a} and {b} look like different incidents") and what in n for n in notices
    )


def _split_by_rank(src: Path, tmp_path: Path) -> tuple[Path, Path]:
    """One file per TP rank, as a multi-node server writes them: each node prints server_args."""
    lines = src.read_text().splitlines(keepends=True)
    head = [line for line in lines if "server_args=" in line]
    rank1 = [line for line in lines if "TP1]" in line or "TP1 " in line]
    rank0 = [line for line in lines if line not in rank1]
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text("".join(rank0))
    b.write_text("".join(line.replace("node_rank=0", "node_rank=1") for line in head + rank1))
    assert head and rank1
    return a, b


@pytest.mark.parametrize("src", [TP2_0523, TP4, TP2], ids=lambda p: p.name)
def test_ranks_of_one_server_do_not_warn(tmp_path: Path, src: Path) -> None:
    a, b = _split_by_rank(src, tmp_path)
    code, out, err = run("diagnose", str(a), str(b), "--no-gpu", "--format", "json")
    assert code in (0, 1) and err == ""
    assert not any("different incidents" in n for n in json.loads(out)["notices"])


def test_halves_of_one_log_do_not_warn(tmp_path: Path) -> None:
    lines = Y070.read_text().splitlines(keepends=True)
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("".join(lines[:30]))
    b.write_text("".join(lines[30:]))
    code, out, err = run("diagnose", str(a), str(b), "--no-gpu", "--format", "json")
    assert code == 1 and err == ""
    assert json.loads(out)["verdict"]["category"] == "startup_kv_alloc"


def test_the_same_file_twice_does_not_warn() -> None:
    code, _, err = run("diagnose", str(TP2), str(TP2), "--no-gpu", "--format", "json")
    assert code in (0, 1) and err == ""


# -- watch: the report while the server still runs --------------------------------------------


def test_watch_says_when_the_server_still_runs_after_the_report(tmp_path: Path) -> None:
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
            "--",
            sys.executable,
            FAKE,
            str(Y085),
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
    child = int(pidfile.read_text())
    time.sleep(3.0)  # replay, crash line, grace, report
    assert proc.poll() is None  # watch still runs with its server
    proc.send_signal(signal.SIGTERM)
    _, raw = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    err = raw.decode()
    report = err.index("-- oomdoctor --")
    line = (
        f"oomdoctor: the server (pid {child}) is still running after the report; watch keeps "
        "passing its output through until it exits, then exits with its status"
    )
    assert line in err and err.index(line) > report
    assert err.count(line) == 1
    assert f"the server (pid {child}) was still running 0.5 s after its crash" in err[report:]


def test_watch_says_nothing_of_a_server_that_exited() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomdoctor",
            "watch",
            "--no-gpu",
            "--",
            sys.executable,
            FAKE,
            str(Y085),
            "--mode",
            "crash",
        ],
        capture_output=True,
        env=_env(),
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 1
    assert b"-- oomdoctor --" in proc.stderr
    assert b"still running" not in proc.stderr


# -- shell completion -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shell", "registers"),
    [
        ("bash", "complete -o nosort -F _oomdoctor_completion oomdoctor"),
        ("zsh", "compdef _oomdoctor_completion oomdoctor"),
        ("fish", "complete --no-files --command oomdoctor"),
    ],
)
def test_shell_completion_script(shell: str, registers: str) -> None:
    commands = [[sys.executable, "-m", "oomdoctor"]]
    script = Path(sys.executable).parent / "oomdoctor"  # the console script, where installed
    if script.is_file():
        commands.append([str(script)])
    for command in commands:
        proc = subprocess.run(
            command,
            env=_env(_OOMDOCTOR_COMPLETE=f"{shell}_source"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0 and proc.stderr == "", (command, proc.stderr)
        assert "complete" in proc.stdout and registers in proc.stdout
        assert "_OOMDOCTOR_COMPLETE" in proc.stdout


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("oomdoctor diag", "1", ["plain,diagnose"]),
        ("oomdoctor diagnose --col", "2", ["plain,--color"]),
        ("oomdoctor diagnose --color ", "3", ["plain,auto", "plain,always", "plain,never"]),
        ("oomdoctor diagnose serv", "2", ["file,serv"]),  # the shell lists the files
        ("oomdoctor watch --log x", "3", ["file,x"]),
    ],
)
def test_shell_completion_completes(words: str, cword: str, expected: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor"],
        env=_env(_OOMDOCTOR_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=cword),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.splitlines() == expected
