"""Issue 22 §3: what oomdoctor keeps stays flat as the input grows, counted (not timed).

The report lists the largest few holders, processes and ranks and counts the rest; per-PID
structures grow with the PIDs, no faster. Inputs are generated in the real formats
(../shared/reference/vllm-logs.md, pytorch-oom.md, gpu-snapshots.md).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.gpu.loaders import load
from oomdoctor.judge.holders import TOP, top
from oomdoctor.read.decode import Decoder
from oomdoctor.read.sources import ReadStats
from oomdoctor.report.build import build_report
from oomdoctor.report.render import render
from oomdoctor.rules.schema import Rule

HEAD = "INFO 05-01 10:00:00 [gpu_worker.py:96]"
ERR = "ERROR 05-01 10:05:00 [multiproc_executor.py:470]"
UUID = "GPU-0b7e4c2a-1d3f-4e5a-8b9c-0d1e2f3a4b5c"


def _oom(procs: str) -> str:
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a "
        f"total capacity of 79.19 GiB of which 731.44 MiB is free.{procs} Including non-PyTorch "
        "memory, this process has 38.47 GiB memory in use. Of the allocated memory 34.02 GiB is "
        "allocated by PyTorch, and 2.87 GiB is reserved by PyTorch but unallocated."
    )


def _tail(prefix: str, procs: str = "") -> list[str]:
    return [
        f"{prefix} {ERR} WorkerProc hit an exception.",
        f"{prefix} {ERR} Traceback (most recent call last):",
        f'{prefix} {ERR}   File "/usr/lib/python3/vllm/v1/worker/gpu_model_runner.py", line 1500,'
        " in execute_model",
        f"{prefix} {ERR}     hidden_states = self.model(input_ids)",
        f"{prefix} {ERR} {_oom(procs)}",
    ]


def workers_log(path: Path, n: int) -> Path:
    """n vLLM workers `(VllmWorker rank=R pid=P)` with their start-up lines; the last fails."""
    lines = [f"(EngineCore_0 pid=100) {HEAD} Initializing a V1 LLM engine (v0.8.5)"]
    for i in range(n):
        p = f"(VllmWorker rank={i} pid={1000 + i})"
        lines += [
            f"{p} {HEAD} Starting to load model Qwen/Qwen2.5-7B-Instruct...",
            f"{p} INFO 05-01 10:00:05 [gpu_model_runner.py:1329] Model loading took 14.25 GiB "
            "and 5.1 seconds",
        ]
    lines += _tail(f"(VllmWorker rank={n - 1} pid={1000 + n - 1})")
    path.write_text("\n".join(lines) + "\n")
    return path


def named_log(path: Path, n: int) -> Path:
    """An OOM message naming n other processes of 1 GiB each (and one of 3 GiB)."""
    procs = " Process 4999 has 3.00 GiB memory in use." + "".join(
        f" Process {5000 + i} has 1.00 GiB memory in use." for i in range(n - 1)
    )
    lines = [f"(EngineCore_0 pid=100) {HEAD} Initializing a V1 LLM engine (v0.8.5)"]
    path.write_text("\n".join(lines + _tail("(VllmWorker rank=0 pid=1000)", procs)) + "\n")
    return path


def snapshot(path: Path, n: int) -> Path:
    procs = [
        {
            "pid": 20000 + i,
            "gpu_uuid": UUID,
            "gpu_bus_id": "00000000:3b:00.0",
            "used_bytes": (1 << 30) * (3 if i == n // 2 else 1),
            "name": f"python3 notebook_{i}.py",
            "visible": True,
        }
        for i in range(n)
    ]
    path.write_text(
        json.dumps(
            {
                "schema": "oomdoctor-snapshot",
                "version": 1,
                "source": "nvml",
                "devices": [
                    {
                        "index": 0,
                        "uuid": UUID,
                        "pci_bus_id": "00000000:3b:00.0",
                        "name": "NVIDIA H100 80GB HBM3",
                        "memory_total_bytes": 85520809984,
                        "memory_used_bytes": 84754169856,
                        "memory_free_bytes": 766640128,
                    }
                ],
                "processes": procs,
            }
        )
    )
    return path


@pytest.mark.parametrize("n", [20, 200])
def test_report_lists_the_largest_holders_and_counts_the_rest(
    tmp_path: Path, rules: tuple[Rule, ...], n: int
) -> None:
    diag = pipeline.run([str(named_log(tmp_path / "named.log", n))], rules)
    assert diag.oom is not None and len(diag.oom.message.processes) == n  # all were read
    report = build_report(diag)
    listed = report["failure"]["oom"]["processes"]
    assert len(listed) == TOP and listed[0] == {"pid": 4999, "gib": 3.0}
    assert report["failure"]["oom"]["processes_more"] == {"count": n - TOP, "gib": n - TOP}
    holders = report["judgement"]["holders"]
    assert len(holders) <= TOP + 1 and report["judgement"]["holders_more"]["count"] >= n - TOP
    held = [a for a in report["actions"] if " hold" in a["text"]]
    assert len(held) == TOP + 1  # the largest, then one for the rest
    assert f"{n - TOP} more processes hold {n - TOP:.2f} GiB" in held[-1]["text"]
    text = render(report, "text")
    assert f"{n - TOP} more processes" in text
    assert text.count("\n                       process 50") < TOP  # the OOM message's rows
    assert text.count(" holds 1.00 GiB on GPU 0") < TOP  # the actions


@pytest.mark.parametrize("n", [30, 300])
def test_snapshot_report_is_bounded(tmp_path: Path, rules: tuple[Rule, ...], n: int) -> None:
    log = named_log(tmp_path / "one.log", 1)
    gpu = load([snapshot(tmp_path / "snap.json", n)])
    diag = pipeline.run([str(log)], rules, gpu=gpu)
    assert diag.gpu is not None and len(diag.gpu.holders) == n  # every holder judged
    report = build_report(diag)
    procs = report["gpu"]["processes"]
    assert len(procs) == TOP and 20000 + n // 2 in {p["pid"] for p in procs}  # the largest
    assert report["gpu"]["processes_more"]["count"] == n - TOP
    assert len([a for a in report["actions"] if " hold" in a["text"]]) <= TOP + 1
    assert f"{n - TOP} more processes hold" in render(report, "text")
    assert "GiB (the largest are listed)" in render(report, "markdown")


def test_per_pid_structures_grow_linearly_and_the_report_not_at_all(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    small = pipeline.run([str(workers_log(tmp_path / "a.log", 50))], rules)
    large = pipeline.run([str(workers_log(tmp_path / "b.log", 500))], rules)
    assert len(small.incident.actor_roles) == 51 and len(large.incident.actor_roles) == 501
    assert len(large.incident.ranks) <= 10 * len(small.incident.ranks)
    assert len(large.incident.failures) == len(small.incident.failures)
    a, b = build_report(small), build_report(large)
    assert len(b["actions"]) == len(a["actions"])
    assert len(json.dumps(b)) < 1.5 * len(json.dumps(a))
    assert len(b["budget"].get("ranks") or []) <= TOP


def test_top_keeps_order_and_the_ones_it_must() -> None:
    sizes = [1.0, 5.0, 2.0, 9.0, 3.0]
    shown = top(sizes, lambda x: x, n=3, always=lambda x: x == 1.0)
    assert shown.kept == (0, 1, 3) and shown.more == 2 and shown.more_gib == 5.0
    assert top(sizes, lambda x: x, n=5) == (tuple(range(5)), 0, 0.0)


def test_a_million_small_gzip_members_are_each_fed_a_bounded_piece() -> None:
    """Counted: every call hands the decompressor at most FEED bytes, so the rest of the read
    is never copied at each member's end."""
    members = b"".join(gzip.compress(f"line {i}\n".encode(), mtime=0) for i in range(3000))
    fed: list[int] = []
    dec = Decoder(ReadStats("x.gz"))
    real = dec._inflate_piece

    def spy(data: bytes):  # type: ignore[no-untyped-def]
        fed.append(len(data))
        return real(data)

    dec._inflate_piece = spy  # type: ignore[method-assign]
    out = b"".join(dec.feed(members)) + b"".join(dec.close())
    assert out.count(b"\n") == 3000
    assert max(fed) <= 1 << 14 and len(fed) <= len(members) // (1 << 14) + 1


def test_idle_streams_are_forgotten_and_the_verdict_stays(
    tmp_path: Path, rules: tuple[Rule, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stream per PID would be kept for 100k workers; past 2 × MAX_IDLE_STREAMS the old
    ones holding only their last line go, and the failing worker's stream is kept."""
    from oomdoctor.incident import assemble

    log = workers_log(tmp_path / "w.log", 300)
    whole = build_report(pipeline.run([str(log)], rules))
    kept: list[int] = []
    real = assemble.Assembler.incident

    def counted(self: assemble.Assembler) -> object:
        kept.append(len(self._streams))
        return real(self)

    monkeypatch.setattr(assemble, "MAX_IDLE_STREAMS", 16)
    monkeypatch.setattr(assemble.Assembler, "incident", counted)
    bounded = build_report(pipeline.run([str(log)], rules))
    assert kept and kept[0] <= 2 * 16 + 1
    assert bounded["verdict"] == whole["verdict"] and bounded["actions"] == whole["actions"]
    assert bounded["failure"] == whole["failure"]


def test_a_message_every_worker_prints_is_matched_once(
    tmp_path: Path, rules: tuple[Rule, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted: the signatures run once per distinct message text, not once per worker."""
    from oomdoctor.extract import facts

    calls: list[int] = [0]
    real = facts.SignatureMatcher.match

    def counted(self: facts.SignatureMatcher, text: str) -> object:
        calls[0] += 1
        return real(self, text)

    monkeypatch.setattr(facts.SignatureMatcher, "match", counted)
    seen = []
    for n in (50, 500):
        calls[0] = 0
        pipeline.run([str(workers_log(tmp_path / f"m{n}.log", n))], rules)
        seen.append(calls[0])
    assert seen[1] <= seen[0] + 10, seen


def test_a_short_snapshot_lists_everything_in_every_format(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    """Nothing left out: no *_more key, and every format renders (Markdown's template is strict)."""
    log = named_log(tmp_path / "one.log", 1)
    report = build_report(pipeline.run([str(log)], rules, gpu=load([snapshot(tmp_path / "s", 3)])))
    assert len(report["gpu"]["processes"]) == 3 and "processes_more" not in report["gpu"]
    assert "holders_more" not in report["judgement"]
    for fmt in ("text", "markdown", "json"):
        assert "more processes" not in render(report, fmt)
