"""Inputs are read through the descriptor they were opened with, one at a time (issue 22 item 2):
a big log rotated, removed or truncated while the forked readers scan it, and a thousand rank
logs under a small descriptor limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.read import parallel

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.00 GiB is free.\n"
)


def _big_log(path: Path) -> None:
    filler = b"INFO 01-01 00:00:00 engine.py:1] Avg prompt throughput: 1.0 tokens/s\n" * 40_000
    path.write_bytes(filler + OOM.encode() + filler[:1000])


def _kinds(incident: object) -> list[str]:
    return [f.kind for f in incident.failures]  # type: ignore[attr-defined]


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "CHUNK", 1 << 20)
    log = tmp_path / "server.log"
    _big_log(log)
    if not parallel.usable(log):
        pytest.skip("no fork or a single core here")
    return log


def _meanwhile(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> list[int]:
    """Run ``change`` just before the forked readers start; record that they ran."""
    real = parallel.scan_file
    ran: list[int] = []

    def scan_file(*args: object, **kwargs: object) -> object:
        change()
        ran.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(parallel, "scan_file", scan_file)
    return ran


def test_rotated_while_read_is_read_as_opened(
    forked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rotate() -> None:
        forked.rename(forked.with_suffix(".log.1"))
        forked.write_bytes(b"INFO nothing happened here\n" * 60_000)

    ran = _meanwhile(monkeypatch, rotate)
    incident = pipeline.read([str(forked)], pipeline.load_rules())
    assert ran
    assert "cuda_oom" in _kinds(incident)
    assert any("rotated or replaced while it was read" in n for n in incident.notices)


def test_removed_while_read_is_read_as_opened(
    forked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _meanwhile(monkeypatch, forked.unlink)
    incident = pipeline.read([str(forked)], pipeline.load_rules())
    assert ran
    assert "cuda_oom" in _kinds(incident)
    assert any("removed while it was read" in n for n in incident.notices)


def test_truncated_while_read_says_so(forked: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def truncate() -> None:
        os.truncate(forked, 1000)

    ran = _meanwhile(monkeypatch, truncate)
    incident = pipeline.read([str(forked)], pipeline.load_rules())
    assert ran
    assert any("truncated while it was read" in n for n in incident.notices)


def test_many_rank_logs_need_few_descriptors(tmp_path: Path) -> None:
    names = []
    for rank in range(300):
        log = tmp_path / f"rank{rank:04d}.log"
        log.write_text(OOM if rank == 250 else f"INFO rank {rank} started\n")
        names.append(str(log))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "diagnose", "--no-gpu", *names],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        check=False,
    )
    assert "Too many open files" not in proc.stderr
    assert proc.returncode == 1, proc.stderr


def test_a_missing_input_still_fails_before_any_is_read(tmp_path: Path) -> None:
    from oomdoctor.read.sources import InputError

    good = tmp_path / "a.log"
    good.write_text(OOM)
    with pytest.raises(InputError, match="no such file"):
        pipeline.read([str(good), str(tmp_path / "missing.log")], pipeline.load_rules())
