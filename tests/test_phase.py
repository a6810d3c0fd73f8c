"""When a failure happened, from every source the log offers (issue 20, item 4): each test writes
a short excerpt in the engines' formats (../shared/reference/) and checks the phase decided, the
line that decided it, and the runner-up where a weaker source disagrees."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.judge import Judgement

HINT = (
    " If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def oom(pools: str | None = None, prefix: str = "torch.OutOfMemoryError: ") -> str:
    pool = f"with {pools} allocated in private pools (e.g., CUDA Graphs), " if pools else ""
    return (
        f"{prefix}CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
        "44.42 GiB of which 301.00 MiB is free. Including non-PyTorch memory, this process has "
        "44.10 GiB memory in use. Of the allocated memory 42.80 GiB is allocated by PyTorch, "
        f"{pool}and 610.00 MiB is reserved by PyTorch but unallocated.{HINT}"
    )


def judged(tmp_path: Path, *files: str) -> Judgement:
    names = []
    for i, text in enumerate(files):
        path = tmp_path / f"log{i}.log"
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        names.append(str(path))
    return pipeline.judge(pipeline.read(names, pipeline.load_rules()))


def phase(j: Judgement) -> tuple[str, int | None]:
    assert j.phase is not None
    return j.phase.value, j.phase.line.number if j.phase.line else None


ARGS = (
    "[2025-10-02 14:02:11] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
    "mem_fraction_static=0.9, tp_size=1, chunked_prefill_size=8192{extra})"
)
READY = "[2025-10-02 14:02:40] The server is fired up and ready to roll!"
DECODE = (
    "[2025-10-02 14:05:01] Decode batch, #running-req: 31, #token: 81234, token usage: 0.41, "
    "cuda graph: True, gen throughput (token/s): 1710.22, #queue-req: 0"
)


def test_the_ready_line_before_it(tmp_path: Path) -> None:
    j = judged(tmp_path, "\n".join([ARGS.format(extra=""), READY, oom("1.20 GiB")]))
    assert phase(j) == ("running", 2)


def test_the_omni_launchers_ready_line_before_it(tmp_path: Path) -> None:
    """SGLang Omni 0.1.9's launcher says its own ready line after the warm-up request."""
    ready = (
        "2026-04-11 09:12:30,118 [INFO] sglang_omni.serve.launcher: Server warmup of 2 "
        "request(s) finished in 3.4 s; the server is ready"
    )
    warmup = "[2026-04-11 09:12:27] Load weight end. elapsed=4.10 s, avail mem=30.12 GB"
    j = judged(tmp_path, "\n".join([warmup, ready, oom()]))
    assert phase(j) == ("running", 2)


def test_serving_lines_say_running_without_a_ready_line(tmp_path: Path) -> None:
    j = judged(tmp_path, "\n".join([DECODE, oom()]))
    assert phase(j) == ("running", 1)
    assert "served" in j.phase.why  # type: ignore[union-attr]


def test_the_private_pool_clause_alone(tmp_path: Path) -> None:
    """No graph memory: not captured yet (weak startup); graph memory: captured (weak running)."""
    none = judged(tmp_path, oom())
    assert phase(none) == ("startup", 1) and none.phase.strength < 0.5  # type: ignore[union-attr]
    (tmp_path / "b").mkdir()
    some = judged(tmp_path / "b", oom("1.20 GiB"))
    assert phase(some) == ("running", 1)


def test_no_clue_from_pools_with_graphs_off_or_a_memory_pool(tmp_path: Path) -> None:
    eager = judged(tmp_path, "\n".join([ARGS.format(extra=", disable_cuda_graph=True"), oom()]))
    assert eager.phase is not None and "private-pool" not in eager.phase.why
    (tmp_path / "pool").mkdir()
    # 40 of 42.80 GiB in private pools: a pluggable allocator's pool (sleep mode), not graphs
    pooled = judged(tmp_path / "pool", oom("40.00 GiB"))
    assert phase(pooled)[0] == "unknown"


def test_words_that_say_it_was_starting(tmp_path: Path) -> None:
    j = judged(
        tmp_path, oom(prefix="[2025-10-02 14:02:20 TP0] Failed to initialize the MoE cache: ")
    )
    assert phase(j) == ("startup", 1)
    assert "Failed to initialize" in j.phase.why  # type: ignore[union-attr]


def test_the_line_before_says_it_failed_to_start(tmp_path: Path) -> None:
    pre = "(EngineCore_DP0 pid=3381) ERROR 10-22 05:41:09 [core.py:708] "
    j = judged(
        tmp_path,
        pre
        + "EngineCore failed to start.\n"
        + pre
        + "RuntimeError: Worker failed with error '"
        + oom(prefix="")
        + "', please check the stack trace above for the root cause",
    )
    assert phase(j) == ("startup", 1)


def test_weights_that_just_finished_loading(tmp_path: Path) -> None:
    j = judged(
        tmp_path,
        "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:09<00:00,  2.31s/it]\n"
        + oom(prefix="RuntimeError: ")
        + "\n",
    )
    assert phase(j)[0] == "startup"


def test_a_constructor_frame(tmp_path: Path) -> None:
    frames = (
        "Traceback (most recent call last):\n"
        '  File "/work/run.py", line 7, in <module>\n'
        '    llm = LLM(model="Qwen/Qwen2.5-7B-Instruct", gpu_memory_utilization=0.9)\n'
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/entrypoints/llm.py", line 243, in '
        "__init__\n"
        "    self.llm_engine = LLMEngine.from_engine_args(\n"
    )
    j = judged(tmp_path, frames + oom())
    assert phase(j)[0] == "startup" and j.phase.strength >= 0.7  # type: ignore[union-attr]


def test_timestamps_order_the_files_of_one_incident(tmp_path: Path) -> None:
    """rank1.log (read first) fails at 14:05; rank0.log's ready line is from 14:02: running."""
    rank1 = "[2025-10-02 14:05:03 TP1] Scheduler hit an exception: " + oom(prefix="")
    rank0 = "\n".join(["[2025-10-02 14:02:31 TP0] Load weight end. avail mem=28.82 GB", READY])
    j = judged(tmp_path, rank1, rank0)
    assert j.phase is not None and j.phase.value == "running", j.phase


@pytest.mark.parametrize("pools", [None, "1.20 GiB"])
def test_a_runner_up_is_kept_when_sources_disagree(tmp_path: Path, pools: str | None) -> None:
    """The ready line says running; the missing pool clause would say startup: kept as rival."""
    j = judged(tmp_path, "\n".join([ARGS.format(extra=""), READY, oom(pools)]))
    assert phase(j)[0] == "running"
    if pools is None:
        assert j.phase_rival is not None and j.phase_rival.value == "startup"
    else:
        assert j.phase_rival is None
