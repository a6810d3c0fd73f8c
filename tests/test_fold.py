"""Issue 22 §3: past FOLD_AFTER_PIDS processes, their repeated records are counted, not assembled
(extract/fold.py), and the incident is the one the lines would have made read one by one.

Logs are generated in vLLM's real multiprocess format (../shared/reference/vllm-logs.md): a
`(VllmWorker rank=R pid=P)` prefix on every worker line. The cap is lowered so that a few
hundred workers cross it; the same log read with no cap is the reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.extract import fold as fold_module
from oomdoctor.extract.fold import Folded, foldable
from oomdoctor.incident.assemble import Assembler
from oomdoctor.model import Incident
from oomdoctor.rules.schema import Rule

HEAD = "INFO 05-01 10:00:00 [gpu_worker.py:96]"
ERR = "ERROR 05-01 10:05:00 [multiproc_executor.py:470]"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 731.44 MiB is free. Including non-PyTorch memory, this "
    "process has 78.47 GiB memory in use. Of the allocated memory 74.02 GiB is allocated by "
    "PyTorch, and 2.87 GiB is reserved by PyTorch but unallocated."
)
CAP = 40


def _worker(rank: int, second: int = 5) -> list[str]:
    p = f"(VllmWorker rank={rank} pid={1000 + rank})"
    return [
        f"{p} {HEAD} Starting to load model Qwen/Qwen2.5-7B-Instruct...",
        f"{p} INFO 05-01 10:00:{second:02d} [gpu_model_runner.py:1329] Model loading took "
        "14.25 GiB and 5.1 seconds",
        f"{p} INFO 05-01 10:00:09 [gpu_worker.py:227] Available KV cache memory: 52.11 GiB",
    ]


def _oom(rank: int) -> list[str]:
    p = f"(VllmWorker rank={rank} pid={1000 + rank})"
    return [
        f"{p} {ERR} WorkerProc hit an exception.",
        f"{p} {ERR} Traceback (most recent call last):",
        f'{p} {ERR}   File "/usr/lib/python3/vllm/v1/worker/gpu_model_runner.py", line 1500, '
        "in execute_model",
        f"{p} {ERR}     hidden_states = self.model(input_ids)",
        f"{p} {ERR} {OOM}",
    ]


def _log(path: Path, n: int, failing: int, varied: bool = False) -> Path:
    lines = [f"(EngineCore_0 pid=100) {HEAD} Initializing a V1 LLM engine (v0.8.5)"]
    for rank in range(n):
        lines += _worker(rank, second=rank % 7 if varied else 5)
    lines += _oom(failing)
    path.write_text("\n".join(lines) + "\n")
    return path


def _read(path: Path, rules: tuple[Rule, ...], cap: int, mp: pytest.MonkeyPatch) -> Incident:
    mp.setattr(fold_module, "FOLD_AFTER_PIDS", cap)
    return pipeline.read([str(path)], rules)


def _same(folded: Incident, whole: Incident) -> None:
    """Everything the judge reads is the same; only the notice and evidence lines may differ."""
    assert folded.engine == whole.engine and folded.engine_rival == whole.engine_rival
    assert dict(folded.actor_roles) == dict(whole.actor_roles)
    assert dict(folded.fact_counts) == dict(whole.fact_counts)
    assert folded.failures == whole.failures  # their frames, context and phase clues too
    assert folded.primary is not None and whole.primary is not None
    assert folded.primary.line == whole.primary.line
    assert folded.version == whole.version and folded.server_args == whole.server_args


@pytest.mark.parametrize("varied", [False, True])
def test_folding_changes_nothing_the_judge_reads(
    tmp_path: Path, rules: tuple[Rule, ...], monkeypatch: pytest.MonkeyPatch, varied: bool
) -> None:
    """A worker past the cap fails: its OOM and traceback are read as always, and every PID
    still counts as this server's engine process."""
    n = 300
    log = _log(tmp_path / "w.log", n, failing=n - 1, varied=varied)
    whole = _read(log, rules, 10**9, monkeypatch)
    folded = _read(log, rules, CAP, monkeypatch)
    _same(folded, whole)
    assert folded.primary is not None and folded.primary.line.actor_pid == 1000 + n - 1
    assert len(folded.actor_roles) == n + 1 and set(folded.actor_roles.values()) == {"engine"}
    assert folded.fact_counts["vllm_kv"] == n
    notice = [x for x in folded.notices if "counted, not assembled" in x]
    # the first CAP processes (the core and CAP - 1 workers) are read in detail; of the others,
    # two lines each are folded, but the failing worker's last one is read after all: it is
    # the line before its traceback
    assert notice and f"{2 * (n + 1 - CAP) - 1:,} lines of {n + 1 - CAP:,} further" in notice[0]
    assert not [x for x in whole.notices if "counted, not assembled" in x]


def test_below_the_cap_nothing_is_folded(
    tmp_path: Path, rules: tuple[Rule, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(tmp_path / "w.log", CAP - 2, failing=3)
    incident = _read(log, rules, CAP, monkeypatch)
    assert not [x for x in incident.notices if "counted, not assembled" in x]
    assert incident.fact_counts["vllm_kv"] == CAP - 2


def test_a_failure_line_is_never_folded(
    tmp_path: Path, rules: tuple[Rule, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker past the cap prints the same OOM: each is a failure of its own."""
    lines = [f"(EngineCore_0 pid=100) {HEAD} Initializing a V1 LLM engine (v0.8.5)"]
    for rank in range(120):
        lines += _worker(rank)
    for rank in range(100, 110):
        lines += _oom(rank)
    log = tmp_path / "many.log"
    log.write_text("\n".join(lines) + "\n")
    whole = _read(log, rules, 10**9, monkeypatch)
    folded = _read(log, rules, CAP, monkeypatch)
    _same(folded, whole)
    notice = [x for x in folded.notices if "counted, not assembled" in x]
    # the two start-up lines of the 121 - CAP processes past the cap, and the repeated
    # `WorkerProc hit an exception.` of nine failing ones; but the line before each of the ten
    # tracebacks is read after all
    folded_lines = 2 * (121 - CAP) + 9 - 10
    assert notice and notice[0].startswith(f"{folded_lines:,} lines of {121 - CAP:,} ")


def test_what_may_be_folded() -> None:
    """Every kind the assembler handles is kept (but `Model loading took`), and every failure."""
    kept = Assembler(("x",)).unfoldable()
    assert foldable(["vllm_kv", "oom_part"], kept) and foldable(["marker", "vllm_weights"], kept)
    assert not foldable([], kept)  # a line with no facts is not a record worth counting
    for kind in (
        *("cuda_oom", "frame", "exception", "traceback_start", "vllm_config", "watchdog"),
        *("load_end", "kv_allocated", "load_progress", "ready", "retraction", "stats"),
    ):
        assert kind in kept and not foldable(["vllm_kv", kind], kept)


def test_folded_counts_add_up() -> None:
    folded = Folded()
    for pid in (5, 6, 5):
        folded.add(pid, f"VllmWorker rank={pid}", "vllm", ("oom_part", "vllm_kv"))
    folded.add(7, None, None, ("marker",))
    assert folded.lines == 4
    assert folded.kinds() == {"oom_part": 3, "vllm_kv": 3, "marker": 1}
    assert folded.styles() == {"vllm": 3}
    assert folded.actors == {5: ("VllmWorker rank=5", 2), 6: ("VllmWorker rank=6", 1)}
