"""No input ends in exit 70 (issue 22, Done when): every command, every option, hostile values and
hostile files. A case fails when the command raises what `oomdoctor` would turn into exit 70 (an
exception that is not SystemExit or an OSError of the environment), exits 70, prints a
traceback, or does not finish within its alarm (a FIFO that blocks, a read with no end).

In-process (click's runner) for speed: about 700 invocations in well under a minute. The working
directory is a deep temporary one, so that `../../etc/passwd` given as an output stays inside it.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli

#: Seconds one invocation may take before it counts as hung.
ALARM_S = 20

VALUES = [
    "nan",
    "-nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e23",
    "1e-400",
    "1" + "0" * 400,
    "9" * 5000,
    "",
    " ",
    "é",
    "\x1b]52;c;aGk=\x07\x1b[2J",
    "%n%s%x",
    "-",
    "1,5",
    "0x10",
    "80GiB",
    "16EiB",
    "a\nb",
    "../../etc/passwd",
]
#: Options whose value names a file written: only paths that are harmless to write.
OUTPUTS = {"-o", "--output", "--svg", "--log"}
#: Options and arguments whose value names a file read.
INPUTS = {"--model", "--snapshot", "--rules", "logs", "rule_dir"}

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1e400 GiB. GPU 0 has a "
    "total capacity of nan GiB of which 16 EiB is free. Process 1 has 9" + "9" * 400 + " MiB "
    "memory in use.\n[2025-09-22 08:40:00 TP0] Load weight begin. avail mem=70,50 GB\n"
)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Hostile files by name: devices, FIFOs, directories, deep and non-finite JSON, binary."""
    root = tmp_path_factory.mktemp("hostile")
    out: dict[str, Path] = {}

    def put(name: str, data: bytes) -> None:
        path = root / name
        path.write_bytes(data)
        out[name] = path

    (root / "zero").symlink_to("/dev/zero")
    out["zero"] = root / "zero"
    os.mkfifo(root / "fifo")
    out["fifo"] = root / "fifo"
    (root / "dir").mkdir()
    out["dir"] = root / "dir"
    out["missing"] = root / "missing" / "x"
    put("empty", b"")
    put("deep.json", b"[" * 100_000 + b"]" * 100_000)
    put("nan.json", b'{"hidden_size": NaN, "num_hidden_layers": 1e400, "vocab_size": -1}')
    put("total.json", b'{"metadata": {"total_size": 1e400}}')
    put("binary", random.Random(22).randbytes(64 << 10))
    put("latin1.log", "GPU 0 has a total capacity of 79.19 GiB caf\xe9\n".encode("latin-1"))
    put("oom.log", OOM.encode())
    put("long-line.log", b"x" * (2 << 20))
    put("nul.log", b"\0" * 4096 + OOM.encode())
    put("deep.toml", b'id = "x"\nx = ' + b"[" * 5000 + b"]" * 5000 + b"\n")
    put("smi.xml", b"<?xml version='1.0'?>" + b"<a>" * 50_000 + b"</a>" * 50_000)
    put("ctrl\x1b[2J\nname.log", OOM.encode())
    rules = root / "rules"
    rules.mkdir()
    (rules / "zero.toml").symlink_to("/dev/zero")
    os.mkfifo(rules / "engine-markers.toml")
    (rules / "deep.toml").write_bytes(out["deep.toml"].read_bytes())
    (rules / "peek.toml").write_text(
        'id = "peek"\ncategory = "not_oom"\npriority = 1\ntitle = "x"\n[docs]\nwhat = "x"\n'
        'why = "x"\nremedy = "x"\n[when]\nall = ["gpu.fault"]\n[fixtures]\n'
        'fire = ["../../etc/passwd"]\nsilent = ["/proc/self/environ"]\n'
    )
    out["rules"] = rules
    return {k: str(v) for k, v in out.items()}


def _commands() -> Iterator[tuple[list[str], click.Command]]:
    def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    yield from walk(cli, [])


#: What each command needs besides the option under test, so that the option is reached.
BASE = {
    "diagnose": ["--no-gpu"],
    "plan": ["--gpu", "H100", "--weights", "16GiB", "--kv-bytes-per-token", "131072"],
    "watch": ["--no-gpu"],
}


def _cases(files: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    oom = files["oom.log"]
    for path, command in _commands():
        name = " ".join(path)
        base = BASE.get(path[0], [])
        tail = ["--", "true"] if path[0] == "watch" else []
        logs = [oom] if path[0] == "diagnose" else []
        for param in command.params:
            key = param.opts[0] if isinstance(param, click.Option) else param.name or ""
            if isinstance(param, click.Option) and param.is_flag:
                yield name, [*path, *base, *param.opts[:1], *logs, *tail]
                continue
            # A FIFO named as a log or an output waits for its other end, as `cat` and `>` do
            # (process substitution has a writer); named as a config, rules or a snapshot it
            # is refused or read at once (tests/test_bounded_reads.py).
            if key in OUTPUTS:
                values = ["../../etc/passwd", "/dev/full", files["dir"], files["missing"]]
                values += [files["zero"], "-", "", "\x1b[2J"]
            elif key in INPUTS or (isinstance(param, click.Argument) and key == "logs"):
                waits = key == "logs" or path[0] == "watch"
                values = [v for k, v in files.items() if not (waits and k == "fifo")]
                values += ["/proc/self/environ", "/dev/zero", "-"]
            else:
                values = VALUES
            for value in values:
                if isinstance(param, click.Argument):
                    if path[0] == "watch":
                        args = [*path, *base, "--", value]
                    elif key == "logs":
                        args = [*path, *base, value]
                    else:
                        args = [*path, value]
                else:
                    args = [*path, *base, param.opts[0], value, *logs, *tail]
                yield name, args
    # Several inputs at once, each hostile, and the follow reader on a hostile stream.
    yield (
        "diagnose",
        ["diagnose", "--no-gpu", *[files[k] for k in ("oom.log", "binary", "nul.log")]],
    )
    yield "diagnose", ["diagnose", "--no-gpu", "--follow", "-"]


class Hung(BaseException):
    """Raised by the alarm: not an OSError (TimeoutError is one, and the CLI turns those into
    exit 3), nor an Exception a command might catch."""


@contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: object) -> None:
        raise Hung(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_no_input_ends_in_exit_70(
    hostile: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)  # ../../etc/passwd as an output lands in tmp_path
    monkeypatch.setenv("OOMDOCTOR_NVML_TIMEOUT_S", "2")
    runner = CliRunner()
    failures: list[str] = []
    count = 0
    for name, args in _cases(hostile):
        count += 1
        stdin = OOM.encode() + bytes(range(256)) * 16 if "--follow" in args else b""
        try:
            with _alarm(ALARM_S):
                result = runner.invoke(cli, args, input=stdin)
        except Hung as hung:
            failures.append(f"{name} {[a[:60] for a in args]!r}: {hung}")
            continue
        exc = result.exception
        crashed = exc is not None and not isinstance(exc, SystemExit | OSError)
        output = result.stdout + result.stderr
        if crashed or result.exit_code == 70 or "Traceback" in output:
            why = f"{type(exc).__name__}: {exc}" if crashed else f"exit {result.exit_code}"
            failures.append(f"{name} {[a[:60] for a in args]!r}: {why}")
    assert count > 500
    assert not failures, f"{len(failures)} of {count} cases:\n" + "\n".join(failures[:40])
