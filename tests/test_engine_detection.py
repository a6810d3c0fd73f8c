"""The engine (and the stack around it) told from any single line: one case per row of
knowledge/engines.toml's kinds of evidence (sglang-logs.md §11, vllm-logs.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline

TMS = "[torch_memory_saver.cpp] CUresult error: 2 (out of memory)  file=csrc/utils.h func=cu_mem_create line=194"
CASES: list[tuple[str, list[str], str | None, set[str]]] = [
    ("tms C++ line", [TMS], "sglang", {"torch_memory_saver"}),
    (
        "cumem C++ line",
        ["CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"],
        "vllm",
        {"vllm-sleep-mode"},
    ),
    (
        "PyTorch C++ envelope: any engine",
        [
            "[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] memory allocation "
            "failed with OOM on device 1 while trying to allocate 20971520 bytes (free: 15794176, "
            "total: 150111977472)."
        ],
        None,
        set(),
    ),
    (
        "vLLM V1 engine core prefix + envelope",
        [
            "(EngineCore_DP0 pid=2413) ERROR 09-12 08:31:55 [core.py:790] Invocation of wake_up method failed"
        ],
        "vllm",
        set(),
    ),
    (
        "vLLM V0 worker prefix, old envelope",
        [
            "(VllmWorkerProcess pid=67) INFO 11-05 03:21:41 model_runner.py:1025] Loading model weights took 10.0714 GB"
        ],
        "vllm",
        set(),
    ),
    (
        "vLLM 0.7.3 envelope alone",
        [
            "INFO 02-20 10:00:00 worker.py:134] Sleep mode freed 61.20 GiB memory, 3.10 GiB memory is still in use."
        ],
        "vllm",
        set(),
    ),
    (
        "a cut vLLM header",
        [
            "[multiproc_executor.py:492] ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory utilization (0.95, 45.01 GiB)."
        ],
        "vllm",
        set(),
    ),
    (
        "SGLang envelope with rank tags",
        [
            "[2025-08-01 10:15:02 DP1 TP1 EP1] Decode batch. #running-req: 3, #token: 100, token usage: 0.01, gen throughput (token/s): 9.00, #queue-req: 0"
        ],
        "sglang",
        set(),
    ),
    (
        "SGLang 0.3.x time-only envelope",
        ["[10:15:02 TP0] Prefill out of memory. Try to lower your batch size."],
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
            "2026-06-24 16:30:22,323 [INFO] sglang_omni.pipeline.stage_workers: StageGroup thinker: spawned 1 process(es) (pids=[4380])"
        ],
        "sglang-omni",
        set(),
    ),
    (
        "vLLM-Omni stage engine",
        [
            "(StageEngineCoreProc_stage0_replica0 pid=7) INFO 08-30 12:00:00 [core.py:90] [Stage-0] engine started"
        ],
        "vllm-omni",
        set(),
    ),
    (
        "vLLM-Omni diffusion worker",
        [
            "(DiffusionWorker pid=2604) ERROR 08-30 12:05:57 [stage_diffusion_proc.py:670] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 260.00 MiB."
        ],
        "vllm-omni",
        set(),
    ),
    (
        "verl actor around an SGLang line",
        [
            "(WorkerDict pid=12504) [2025-05-09 20:58:44] Received sigquit from a child process. It usually means the child failed."
        ],
        "sglang",
        {"verl"},
    ),
    (
        "OpenRLHF actors around vLLM frames",
        [
            '(ActorModelRayActor pid=348952)   File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", line 207, in wake_up',
            "(ActorModelRayActor pid=348952) RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
        ],
        "vllm",
        {"openrlhf", "vllm-sleep-mode"},
    ),
    (
        "slime memory checkpoint: a stack part, no engine",
        [
            "[Rank 0] Memory-Usage before wake_up model: {'gpu': '0', 'total_GB': 79.19, 'free_GB': 2.31}"
        ],
        None,
        {"slime"},
    ),
    (
        "Ascend trailer: hardware, no engine",
        [
            "[ERROR] 2026-01-07-02:38:42 (PID:1692557, Device:0, RankID:-1) ERR00006 PTA memory error"
        ],
        None,
        {"ascend-npu"},
    ),
    (
        "an NPU OOM line alone",
        [
            "RuntimeError: NPU out of memory. Tried to allocate 226.00 MiB (NPU 2; 60.96 GiB total capacity; 58.13 GiB already allocated; 97.16 MiB free; 58.42 GiB reserved in total by PyTorch)"
        ],
        None,
        {"ascend-npu"},
    ),
    (
        "an SGLang frame",
        [
            '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2011, in run_scheduler_process',
            "ValueError: boom",
        ],
        "sglang",
        set(),
    ),
    (
        "a vLLM-Ascend frame",
        [
            '  File "/opt/vllm_ascend/worker/model_runner_v1.py", line 1200, in execute_model',
            "RuntimeError: NPU out of memory. NPUWorkspaceAllocator tried to allocate 180.00 MiB(NPU 0; 60.96 GiB total capacity; 89.51 MiB free).",
        ],
        "vllm-ascend",
        {"ascend-npu"},
    ),
    (
        "SGLang 0.3.x imports vLLM: the outermost frame decides",
        [
            '  File "/env/lib/python3.12/site-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 111, in forward_thread_func',
            '  File "/env/lib/python3.12/site-packages/vllm/utils.py", line 928, in _patched_set_stream',
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
