"""The engine (and the stack around it) told from any single line: one case per row of
knowledge/engines.toml's kinds of evidence (sglang-logs.md §11, vllm-logs.md).

Every input is written from the templates of ../shared/reference/*.md (envelopes, messages, frames)
with values of its own: none is a line of a real log (tests/test_no_copied_lines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline

TMS = "[torch_memory_saver.cpp] CUresult error: 2 (out of memory)  file=csrc/utils.h func=cu_mem_create line=194"
CASES: list[tuple[str, list[str], str | None, set[str]]] = [
    ("tms C++ line", [TMS], "sglang", {"torch_memory_saver"}),
    (
        "cumem C++ line",
        ["CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:163"],
        "vllm",
        {"vllm-sleep-mode"},
    ),
    (
        "PyTorch C++ envelope: any engine",
        [
            "[rank2]:[W1126 04:51:09.118204377 CUDACachingAllocator.cpp:3934] memory allocation "
            "failed with OOM on device 2 while trying to allocate 41943040 bytes (free: 28311552, "
            "total: 85031714816)."
        ],
        None,
        set(),
    ),
    (
        "vLLM V1 engine core prefix + envelope",
        [
            "(EngineCore_DP0 pid=5127) ERROR 03-02 14:06:31 [core.py:790] Invocation of wake_up method failed"
        ],
        "vllm",
        set(),
    ),
    (
        "vLLM V0 worker prefix, old envelope",
        [
            "(VllmWorkerProcess pid=4121) INFO 03-14 09:12:07 model_runner.py:1071] Loading model weights took 14.9888 GB"
        ],
        "vllm",
        set(),
    ),
    (
        "vLLM 0.7.3 envelope alone",
        [
            "INFO 06-03 21:40:12 worker.py:134] Sleep mode freed 52.87 GiB memory, 2.44 GiB memory is still in use."
        ],
        "vllm",
        set(),
    ),
    (
        "a cut vLLM header",
        [
            "[multiproc_executor.py:511] ValueError: Free memory on device (12.80/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
        ],
        "vllm",
        set(),
    ),
    (
        "SGLang envelope with rank tags",
        [
            "[2025-10-17 06:33:48 DP1 TP1 EP1] Decode batch. #running-req: 7, #token: 4182, token usage: 0.03, gen throughput (token/s): 211.40, #queue-req: 0"
        ],
        "sglang",
        set(),
    ),
    (
        "SGLang 0.3.x time-only envelope",
        ["[18:42:57 TP1] Prefill out of memory. Try to lower your batch size."],
        "sglang",
        set(),
    ),
    (
        "SGLang wrapper text without an envelope",
        ["Scheduler hit an exception: Traceback (most recent call last):"],
        "sglang",
        set(),
    ),
    (
        "SGLang Omni envelope",
        [
            "2026-05-08 11:02:45,917 [INFO] sglang_omni.pipeline.stage_workers: StageGroup thinker: spawned 1 process(es) (pids=[6021])"
        ],
        "sglang-omni",
        set(),
    ),
    (
        "vLLM-Omni stage engine",
        [
            "(StageEngineCoreProc_stage0_replica0 pid=318) INFO 01-22 19:14:03 [core.py:90] [Stage-0] engine started"
        ],
        "vllm-omni",
        set(),
    ),
    (
        "vLLM-Omni diffusion worker",
        [
            "(DiffusionWorker pid=5310) ERROR 02-11 17:42:09 [diffusion_worker.py:245] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB."
        ],
        "vllm-omni",
        set(),
    ),
    (
        "verl actor around an SGLang line",
        [
            "(WorkerDict pid=88317) [2025-11-20 04:17:36] Received sigquit from a child process. It usually means the child failed."
        ],
        "sglang",
        {"verl"},
    ),
    (
        "OpenRLHF actors around vLLM frames",
        [
            '(ActorModelRayActor pid=71904)   File "/opt/conda/lib/python3.11/site-packages/vllm/device_allocator/cumem.py", line 184, in wake_up',
            "(ActorModelRayActor pid=71904) RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:66",
        ],
        "vllm",
        {"openrlhf", "vllm-sleep-mode"},
    ),
    (
        "slime memory checkpoint: a stack part, no engine",
        [
            "[Rank 3] Memory-Usage before wake_up model: {'gpu': '3', 'total_GB': 139.81, 'free_GB': 4.06, 'used_GB': 135.75, 'allocated_GB': 0.0, 'reserved_GB': 0.0}"
        ],
        None,
        {"slime"},
    ),
    (
        "Ascend trailer: hardware, no engine",
        ["[ERROR] 2026-04-15-13:27:08 (PID:408112, Device:1, RankID:1) ERR00006 PTA memory error"],
        None,
        {"ascend-npu"},
    ),
    (
        "an NPU OOM line alone",
        [
            "RuntimeError: NPU out of memory. Tried to allocate 1.50 GiB (NPU 1; 60.96 GiB total capacity; 57.02 GiB already allocated; 57.02 GiB current active; 812.00 MiB free; 59.40 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation."
        ],
        None,
        {"ascend-npu"},
    ),
    (
        "an SGLang frame",
        [
            '  File "/opt/conda/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 2467, in run_scheduler_process',
            "ValueError: boom",
        ],
        "sglang",
        set(),
    ),
    (
        "a vLLM-Ascend frame",
        [
            '  File "/usr/local/python3.11/site-packages/vllm_ascend/worker/model_runner_v1.py", line 1846, in execute_model',
            "RuntimeError: NPU out of memory. NPUWorkspaceAllocator tried to allocate 512.00 MiB(NPU 3; 60.96 GiB total capacity; 301.25 MiB free). If you want to reduce memory usage, take a try to set the environment variable TASK_QUEUE_ENABLE=1.",
        ],
        "vllm-ascend",
        {"ascend-npu"},
    ),
    (
        "SGLang 0.3.x imports vLLM: the outermost frame decides",
        [
            '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 104, in forward_thread_func',
            '  File "/usr/local/lib/python3.10/dist-packages/vllm/utils.py", line 1197, in _patched_set_stream',
            "RuntimeError: CUDA error: out of memory",
        ],
        "sglang",
        set(),
    ),
]


@pytest.mark.parametrize(
    ("lines", "engine", "stack"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_engine_from_lines(
    tmp_path: Path, lines: list[str], engine: str | None, stack: set[str]
) -> None:
    log = tmp_path / "excerpt.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    incident = pipeline.read([str(log)], pipeline.load_rules())
    assert incident.engine == engine, incident.engine_why
    assert stack <= set(incident.stack), incident.stack


def test_a_detected_engine_says_why(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(
        "(EngineCore_DP0 pid=9) ERROR 09-12 08:31:55 [core.py:7] EngineCore failed to start.\n"
    )
    incident = pipeline.read([str(log)], pipeline.load_rules())
    assert incident.engine == "vllm"
    assert incident.engine_why and "line 1" in incident.engine_why
    assert incident.engine_evidence and incident.engine_evidence[0].number == 1
