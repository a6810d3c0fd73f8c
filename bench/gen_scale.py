#!/usr/bin/env python3
"""Generate logs that grow in one dimension at a time, for the scaling benchmark (issue 22 §3).

Each dimension is a count N; the log is otherwise a small vLLM (or SGLang) failure. Formats are
the real ones (../shared/reference/vllm-logs.md, pytorch-oom.md):

- ``pids``: N vLLM workers ``(VllmWorker rank=R pid=P)``, each with its start-up lines, and an
  ``(EngineCore_0 pid=P)`` core; the last worker fails with a CUDA OOM (~390 bytes per PID).
- ``pids_timed``: the same, with the clock running: ten workers a second (vLLM's envelope has
  second resolution), so the lines after the prefix do not repeat exactly.
- ``ranks``: N SGLang ranks ``[… TP{n}]`` printing memory lines, then one rank's OOM.
- ``tracebacks``: N short tracebacks (a warning with a stack each), then the OOM.
- ``chains``: one traceback of N ``During handling of the above exception…`` links, ending in
  the OOM.
- ``frames``: one traceback of N frames, ending in the OOM.
- ``gzip``: N gzip members of one line each (write to a ``.gz`` path), the OOM in the last.
- ``oom_pids``: one OOM message naming N ``Process P has X GiB memory in use`` clauses.
- ``snapshot``: an oomdoctor JSON snapshot of N processes on one GPU (write to a ``.json``
  path); pair it with the ``pids`` log of a small N.

Usage: bench/gen_scale.py DIMENSION N OUT
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

PREFIX = "/usr/local/lib/python3.12/dist-packages"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 731.44 MiB is free.{procs} Including non-PyTorch memory, this "
    "process has 78.47 GiB memory in use. Of the allocated memory 74.02 GiB is allocated by "
    "PyTorch, and 2.87 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
VLLM_HEAD = "INFO 05-01 10:00:00 [gpu_worker.py:96]"


def _vllm_tail(prefix: str, procs: str = "") -> Iterator[str]:
    err = f"{prefix} ERROR 05-01 10:05:00 [multiproc_executor.py:470]"
    yield f"{err} WorkerProc hit an exception.\n"
    yield f"{err} Traceback (most recent call last):\n"
    yield f'{err}   File "{PREFIX}/vllm/v1/worker/gpu_model_runner.py", line 1500, in execute_model\n'
    yield f"{err}     hidden_states = self.model(input_ids)\n"
    yield f"{err} {OOM.format(procs=procs)}\n"


def pids(n: int) -> Iterator[str]:
    yield f"(EngineCore_0 pid=100) {VLLM_HEAD} Initializing a V1 LLM engine (v0.8.5)\n"
    for i in range(n):
        p = f"(VllmWorker rank={i} pid={1000 + i})"
        yield f"{p} {VLLM_HEAD} Starting to load model Qwen/Qwen2.5-7B-Instruct...\n"
        yield f"{p} INFO 05-01 10:00:05 [gpu_model_runner.py:1329] Model loading took 14.25 GiB and 5.1 seconds\n"
        yield f"{p} INFO 05-01 10:00:09 [gpu_worker.py:227] Available KV cache memory: 52.11 GiB\n"
    yield from _vllm_tail(f"(VllmWorker rank={max(n - 1, 0)} pid={1000 + max(n - 1, 0)})")


def pids_timed(n: int) -> Iterator[str]:
    yield f"(EngineCore_0 pid=100) {VLLM_HEAD} Initializing a V1 LLM engine (v0.8.5)\n"
    for i in range(n):
        p = f"(VllmWorker rank={i} pid={1000 + i})"
        t = i // 10
        clock = f"05-01 {10 + t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
        yield f"{p} INFO {clock} [gpu_worker.py:96] Starting to load model Qwen/Qwen2.5-7B-Instruct...\n"
        yield f"{p} INFO {clock} [gpu_model_runner.py:1329] Model loading took 14.25 GiB and 5.1 seconds\n"
        yield f"{p} INFO {clock} [gpu_worker.py:227] Available KV cache memory: 52.11 GiB\n"
    yield from _vllm_tail(f"(VllmWorker rank={max(n - 1, 0)} pid={1000 + max(n - 1, 0)})")


def ranks(n: int) -> Iterator[str]:
    for i in range(n):
        r = f"[2026-03-14 09:00:00 TP{i}]"
        yield f"{r} Load weight begin. avail mem=78.21 GB\n"
        yield f"{r} Load weight end. type=Qwen2ForCausalLM, avail mem=43.77 GB, mem usage=34.44 GB.\n"
        yield f"{r} KV Cache is allocated. #tokens: 400000, K size: 18.00 GB, V size: 18.00 GB\n"
    yield "[2026-03-14 09:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    yield f'  File "{PREFIX}/sglang/srt/managers/scheduler.py", line 1361, in event_loop_overlap\n'
    yield "    batch_result = self.run_batch(batch)\n"
    yield OOM.format(procs="") + "\n"


def tracebacks(n: int) -> Iterator[str]:
    for i in range(n):
        yield f"[2026-03-14 09:00:00 TP0] Exception in callback {i}: Traceback (most recent call last):\n"
        yield f'  File "{PREFIX}/sglang/srt/managers/tokenizer_manager.py", line {100 + i % 900}, in handle_loop\n'
        yield "    await self.send(obj)\n"
        yield "ConnectionResetError: [Errno 104] Connection reset by peer\n"
    yield from ranks(1)


def chains(n: int) -> Iterator[str]:
    yield "[2026-03-14 09:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    for i in range(n):
        yield f'  File "{PREFIX}/sglang/srt/managers/scheduler.py", line {1000 + i % 900}, in step_{i}\n'
        yield "    self.run_batch(batch)\n"
        yield f"RuntimeError: step {i} failed\n"
        yield "\nDuring handling of the above exception, another exception occurred:\n\n"
        yield "Traceback (most recent call last):\n"
    yield f'  File "{PREFIX}/sglang/srt/model_executor/model_runner.py", line 2739, in forward\n'
    yield "    output = self._forward_raw(\n"
    yield OOM.format(procs="") + "\n"


def frames(n: int) -> Iterator[str]:
    yield "[2026-03-14 09:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    for i in range(n):
        yield f'  File "{PREFIX}/sglang/srt/layers/layer_{i % 97}.py", line {1 + i % 3000}, in forward\n'
        yield "    return self.inner(x)\n"
    yield OOM.format(procs="") + "\n"


def oom_pids(n: int) -> Iterator[str]:
    procs = "".join(f" Process {5000 + i} has 2.00 MiB memory in use." for i in range(n))
    yield f"(EngineCore_0 pid=100) {VLLM_HEAD} Initializing a V1 LLM engine (v0.8.5)\n"
    yield from _vllm_tail("(VllmWorker rank=0 pid=1000)", procs)


def snapshot(n: int) -> dict[str, object]:
    uuid = "GPU-0b7e4c2a-1d3f-4e5a-8b9c-0d1e2f3a4b5c"
    return {
        "schema": "oomdoctor-snapshot",
        "version": 1,
        "source": "nvml",
        "time": None,
        "host": "bench",
        "devices": [
            {
                "index": 0,
                "uuid": uuid,
                "pci_bus_id": "00000000:3b:00.0",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_bytes": 85520809984,
                "memory_used_bytes": 84754169856,
                "memory_free_bytes": 766640128,
            }
        ],
        "processes": [
            {
                "pid": 20000 + i,
                "gpu_uuid": uuid,
                "gpu_bus_id": "00000000:3b:00.0",
                "used_bytes": 1 << 21,
                "name": f"python3 worker_{i}.py",
                "cmdline": None,
                "visible": True,
            }
            for i in range(n)
        ],
    }


LOGS: dict[str, Callable[[int], Iterator[str]]] = {
    "pids": pids,
    "pids_timed": pids_timed,
    "ranks": ranks,
    "tracebacks": tracebacks,
    "chains": chains,
    "frames": frames,
    "oom_pids": oom_pids,
}
DIMENSIONS = (*LOGS, "gzip", "snapshot")


def write(dimension: str, n: int, out: Path) -> None:
    if dimension == "snapshot":
        out.write_text(json.dumps(snapshot(n)))
        return
    if dimension == "gzip":
        tail = "".join(ranks(1)).encode()
        with out.open("wb") as fh:
            for i in range(max(n - 1, 0)):
                fh.write(gzip.compress(f"[2026-03-14 09:00:00] line {i}\n".encode(), mtime=0))
            fh.write(gzip.compress(tail, mtime=0))
        return
    with out.open("w") as fh:
        batch: list[str] = []
        for line in LOGS[dimension](n):
            batch.append(line)
            if len(batch) >= 4096:
                fh.write("".join(batch))
                batch.clear()
        fh.write("".join(batch))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("dimension", choices=DIMENSIONS)
    parser.add_argument("n", type=int)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    write(args.dimension, args.n, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
