"""The first screen says only what the evidence says (issue 21, item 2): a bare SIGKILL is not
called the OOM killer, a death by signal is named with its signal, binary input is called
binary, and evidence lines keep their numbers when they are cut."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES

KERNEL = FIXTURES / "sglang-0.5.10" / "host-oom-killer-dmesg.log"
SEGFAULT = FIXTURES / "sglang-0.5.10" / "scheduler-segfault.log"
SIGABRT = FIXTURES / "sglang-0.5.10" / "scheduler-died-sigabrt.log"


def verdict(path: Path) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["diagnose", str(path), "--no-gpu", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return dict(json.loads(result.stdout)["verdict"])


def text(path: Path, width: int = 100) -> str:
    result = CliRunner().invoke(
        cli, ["diagnose", str(path), "--no-gpu"], env={"COLUMNS": str(width)}
    )
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def test_a_bare_killed_is_not_called_the_oom_killer(tmp_path: Path) -> None:
    """bash's job report after `kill -9` (or a pod deletion): nothing says the kernel did it."""
    log = tmp_path / "serve.log"
    log.write_text(
        "[2026-03-03 08:14:05] Load weight begin. avail mem=78.31 GB\n"
        "/opt/launch/serve.sh: line 12:  4471 Killed                  python -m "
        "sglang.launch_server --model-path /models/Qwen2.5-32B-Instruct --tp 2\n",
        "utf-8",
    )
    v = verdict(log)
    assert v["category"] == "not_oom" and float(str(v["confidence"])) < 0.9
    summary = str(v["summary"])
    for cause in ("OOM killer", "`kubectl delete`", "liveness probe", "watchdog", "`dmesg`"):
        assert cause in summary, summary
    assert "ran out" not in summary  # no claim that the host's memory ran out


def test_the_kernels_own_line_names_the_oom_killer() -> None:
    v = verdict(KERNEL)
    assert v["category"] == "not_oom" and v["rule"] == "host-memory"
    assert "Host (CPU) memory ran out" in str(v["summary"])


@pytest.mark.parametrize(
    ("log", "signal"), [(SEGFAULT, "SIGSEGV (signal 11"), (SIGABRT, "SIGABRT (signal 6")]
)
def test_a_death_by_signal_is_named_with_its_signal(log: Path, signal: str) -> None:
    v = verdict(log)
    assert v["category"] == "not_oom" and signal in str(v["summary"]), v["summary"]


def test_a_bare_segfault_is_not_unknown(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    log.write_text(
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f1d6a2c5740 (most recent call first):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", '
        "line 3187 in run_scheduler_process\n",
        "utf-8",
    )
    v = verdict(log)
    assert v["category"] == "not_oom" and "SIGSEGV" in str(v["summary"])
    assert "nothing" not in str(v["summary"]).lower()


def test_an_executable_is_called_binary(tmp_path: Path) -> None:
    exe = Path(os.path.realpath(sys.executable))
    with exe.open("rb") as f:
        head = f.read(4)
    if head != b"\x7fELF":
        pytest.skip("the interpreter is not an ELF file here")
    log = tmp_path / "python3"
    shutil.copyfile(exe, log)
    v = verdict(log)
    assert v["category"] == "unknown"
    assert "is binary (an ELF executable" in str(v["summary"]), v["summary"]
    assert "not a text log" in text(log)


def test_random_bytes_are_called_binary(tmp_path: Path) -> None:
    log = tmp_path / "urandom.bin"
    log.write_bytes(os.urandom(8192))
    assert "is binary" in str(verdict(log)["summary"])
    piped = CliRunner().invoke(cli, ["diagnose", "--no-gpu", "-"], input=os.urandom(8192))
    assert "<stdin> is binary" in piped.stdout


def test_a_log_after_copytruncate_nuls_is_not_binary(tmp_path: Path) -> None:
    """logrotate's copytruncate leaves NULs where the old lines were: the log is still text."""
    log = tmp_path / "server.log"
    log.write_bytes(
        b"\x00" * 6000 + (FIXTURES / "sglang-0.5.2" / "worked-example-y070.log").read_bytes()
    )
    v = verdict(log)
    assert v["category"] == "startup_kv_alloc" and "binary" not in str(v["summary"])


STAMP = "[2025-07-02 07:41:59 DP0 TP0] "


@pytest.mark.parametrize(
    ("line", "numbers"),
    [
        (
            f"{STAMP}max_total_tokens=65536 is larger than the profiled value -284113. Use the "
            "profiled value instead. This means the static share does not even cover the "
            "weights, so there is no room at all for the KV cache on this GPU with these settings.",
            ("65536", "-284113"),
        ),
        (
            f"{STAMP}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.63 GiB. GPU 0 "
            "has a total capacity of 79.19 GiB of which 3.87 GiB is free. Process 21877 has 75.31 "
            "GiB memory in use. Of the allocated memory 72.10 GiB is allocated by PyTorch, and "
            "3.12 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
            "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            ("4.63 GiB", "total capacity of 79.19 GiB"),
        ),
    ],
    ids=["profiled-tokens", "pytorch-oom"],
)
def test_evidence_lines_keep_their_numbers_when_cut(
    line: str, numbers: tuple[str, ...], tmp_path: Path
) -> None:
    """A long envelope and a long message on an 80-column screen: the line is cut (and says
    so), in the middle, where its numbers are not."""
    log = tmp_path / "server.log"
    log.write_text(line + "\n", "utf-8")
    evidence = " ".join(text(log, width=80).split("\nEvidence", 1)[1].split())
    assert "…" in evidence
    for number in numbers:
        assert number in evidence, evidence


def test_an_oom_with_no_phase_and_no_site_is_below_60_with_its_question(tmp_path: Path) -> None:
    """PyTorch 1.x's message alone: nothing says when or where it failed."""
    log = tmp_path / "oom.log"
    log.write_text(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
        "79.35 GiB total capacity; 76.10 GiB already allocated; 1.20 GiB free; 77.00 GiB "
        "reserved in total by PyTorch)\n",
        "utf-8",
    )
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--no-gpu", "--format", "json"])
    data = json.loads(result.stdout)
    assert data["judgement"]["phase"]["value"] == "unknown"
    v = data["verdict"]
    assert v["confidence"] < 0.6
    [alternative] = v["alternatives"]
    assert alternative["category"] != v["category"] and alternative["question"].endswith(
        "Paste the lines before the traceback."
    )
    screen = text(log)
    assert f"Or {alternative['category']} (" in screen.split("What to change")[0]
