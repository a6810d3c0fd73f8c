"""The server's own host is never a target to stop (issue 21, item 2): in veRL the Ray worker
that prints the server's lines hosts the server (and the trainer); and a request no larger than
the free memory is explained (fragmentation or a concurrent allocation), not left as a gap."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES

COLOCATED = FIXTURES / "ray-verl" / "cotenant-rl-colocated.log"
#: A veRL rollout's OOM as the Ray driver prints it (pytorch-oom.md, rl-colocation.md): the
#: WorkerDict actor that hosts SGLang is the `Process 23817` NVML names; 3.12 GiB asked, 3.88 free.
VERL_OOM = (
    "(WorkerDict pid=23817) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.12 "
    "GiB. GPU 0 has a total capacity of 79.15 GiB of which 3.88 GiB is free. Process 23817 has "
    "11.20 GiB memory in use. Including non-PyTorch memory, this process has 70.12 GiB memory in "
    "use. Of the allocated memory 63.05 GiB is allocated by PyTorch, with 120.50 MiB allocated in "
    "private pools (e.g., CUDA Graphs), and 3.30 GiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    "(WorkerDict pid=23817) [2025-08-14 11:02:31] Received sigquit from a child process. It "
    "usually means the child failed.\n"
)
STOP = re.compile(r"(?i)\bstop (it|process|pid)\b|: stop it")


def report(path: Path) -> dict:
    result = CliRunner().invoke(cli, ["diagnose", str(path), "--no-gpu", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_the_ray_worker_hosting_the_server_is_not_stopped(tmp_path: Path) -> None:
    log = tmp_path / "rollout.log"
    log.write_text(VERL_OOM, "utf-8")
    data = report(log)
    about = [a["text"] for a in data["actions"] if "23817" in a["text"]]
    assert about, data["actions"]
    for text in about:
        assert not STOP.search(text.split("so stopping it")[0]), text
        assert "hosts this server" in text and "stopping it stops the server" in text


def test_the_colocated_fixture_names_no_host_to_stop() -> None:
    data = report(COLOCATED)
    assert data["verdict"]["category"] == "cotenant_pressure"
    first = data["actions"][0]["text"]
    assert "hosts this server" in first and not first.rstrip(".").endswith("stop it")
    assert not any(
        STOP.search(a["text"]) and "hosts this server" in a["text"] for a in data["actions"]
    )


def test_a_request_smaller_than_the_free_memory_is_explained(tmp_path: Path) -> None:
    log = tmp_path / "rollout.log"
    log.write_text(VERL_OOM, "utf-8")
    summary = " ".join(report(log)["verdict"]["summary"].split())
    assert "3.12 GiB was requested with 3.88 GiB free" in summary
    assert "fragmentation" in summary and "concurrent allocation" in summary
    assert "3.30 GiB reserved but unallocated" in summary
