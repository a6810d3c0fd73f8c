#!/usr/bin/env python3
"""Generate a realistic SGLang 0.5.10 server log of a given size for the benchmark.

The mix of a production server: one full startup at the top (server_args, the memory lines of
four ranks, CUDA-graph capture, the summary, ready), then hours of serving on two DP ranks
(`Decode batch` every few seconds per rank, `Prefill batch` lines, uvicorn access lines, a
retraction now and then, a few warnings), and at the end a runtime CUDA OOM with its traceback
and the SIGQUIT line. Deterministic for a given size (seeded). Formats: ../shared/reference/.

Usage: bench/gen_log.py [--dense] SIZE OUT   (SIZE like 10M, 100M, 1G)
       bench/gen_log.py --lines 100 OUT
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

START = datetime(2026, 3, 14, 9, 0, 0)

HEAD = """[{t}] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tokenizer_path='Qwen/Qwen2.5-72B-Instruct', tokenizer_mode='auto', skip_tokenizer_init=False, load_format='auto', trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', quantization=None, context_length=32768, device='cuda', served_model_name='Qwen/Qwen2.5-72B-Instruct', chat_template=None, is_embedding=False, revision=None, host='0.0.0.0', port=30000, mem_fraction_static=0.88, max_running_requests=256, max_total_tokens=None, chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', schedule_conservativeness=1.0, cpu_offload_gb=0, page_size=1, tp_size=4, pp_size=1, stream_interval=1, random_seed=1234, log_level='info', api_key='sk-benchmarkFAKEkey0123456789', dp_size=2, load_balance_method='round_robin', enable_dp_attention=False, cuda_graph_max_bs=256, disable_cuda_graph=False, base_gpu_id=0, gpu_id_step=1, enable_memory_saver=False, watchdog_timeout=300, decode_log_interval=40)
[{t}] Using default HuggingFace chat template with detected content format: string
"""
RANKS = ("DP0 TP0", "DP0 TP1", "DP0 TP2", "DP0 TP3", "DP1 TP4", "DP1 TP5", "DP1 TP6", "DP1 TP7")

TAIL = """[{t} DP1 TP4] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.91, #running-req: 212, #queue-req: 37, cuda graph: False, input throughput (token/s): 8412.55
[{t} DP1 TP4] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3616, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1361, in event_loop_overlap
    batch_result = self.run_batch(batch)
                   ^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2684, in run_batch
    batch_result = self.model_worker.forward_batch_generation(
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tp_worker.py", line 469, in forward_batch_generation
    logits_output, can_run_cuda_graph = self.model_runner.forward(
                                        ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2739, in forward
    output = self._forward_raw(
             ^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2676, in forward_extend
    return self.model.forward(
           ^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen2.py", line 390, in forward
    hidden_states = self.model(input_ids, positions, forward_batch, input_embeds)
                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 4 has a total capacity of 79.19 GiB of which 731.44 MiB is free. Including non-PyTorch memory, this process has 78.47 GiB memory in use. Of the allocated memory 74.02 GiB is allocated by PyTorch, with 611.12 MiB allocated in private pools (e.g., CUDA Graphs), and 2.87 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)

[{t}] SIGQUIT received. signum=3, frame=<frame at 0x7f2c8e1b9a40, file '/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child failed.
"""


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


#: Qwen2.5-72B at TP 4: 80 layers x 2 of its 8 KV heads x 128 dims x 2 (K and V) x 2 bytes.
BYTES_PER_TOKEN = 80 * 2 * 128 * 2 * 2
Y = 0.88
WEIGHTS = 34.44
GIB = 1 << 30


def pre_of(i: int) -> float:
    return round(78.21 - 0.02 * i, 2)


#: SGLang sizes the pool from the tightest rank: post - (1 - y) * pre, in whole tokens.
TOKENS = min(
    int((pre_of(i) - WEIGHTS - (1 - Y) * pre_of(i)) * GIB) // BYTES_PER_TOKEN for i in range(8)
)


def startup(t: datetime) -> list[str]:
    out = HEAD.format(t=ts(t)).splitlines(keepends=True)
    half = TOKENS * BYTES_PER_TOKEN / 2 / GIB
    for i, rank in enumerate(RANKS):
        pre = pre_of(i)
        post = pre - WEIGHTS
        pool_end = post - 2 * half - 0.05  # the request-to-token pool is small
        out += [
            f"[{ts(t)} {rank}] Init torch distributed ends. elapsed=3.14 s, mem usage=0.62 GB\n",
            f"[{ts(t)} {rank}] Load weight begin. avail mem={pre:.2f} GB\n",
            f"[{ts(t)} {rank}] Load weight end. elapsed=61.02 s, type=Qwen2ForCausalLM, avail mem={post:.2f} GB, mem usage={WEIGHTS:.2f} GB.\n",
            f"[{ts(t)} {rank}] KV Cache is allocated. #tokens: {TOKENS}, K size: {half:.2f} GB, V size: {half:.2f} GB\n",
            f"[{ts(t)} {rank}] Memory pool end. avail mem={pool_end:.2f} GB\n",
            f"[{ts(t)} {rank}] Capture cuda graph begin. This can take up to several minutes. avail mem={pool_end:.2f} GB\n",
            f"[{ts(t)} {rank}] Capture cuda graph end. Time elapsed: 21.37 s. mem usage=1.12 GB. avail mem={pool_end - 1.12:.2f} GB.\n",
        ]
    headroom = pre_of(0) - WEIGHTS - 2 * half - 0.05 - 1.12
    out.append(
        f"[{ts(t)} DP0 TP0] max_total_num_tokens={TOKENS}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests=256, context_len=32768, available_gpu_mem={headroom:.2f} GB\n"
    )
    out.append(f"[{ts(t)}] The server is fired up and ready to roll!\n")
    return out


#: The serving ranks of the sparse log (two DP ranks) and of the dense one (four).
SPARSE_RANKS = ((0, "DP0 TP0"), (1, "DP1 TP4"))
DENSE_RANKS = ((0, "DP0 TP0"), (1, "DP1 TP2"), (2, "DP2 TP4"), (3, "DP3 TP6"))


def serving(
    rng: random.Random, t: datetime, target: int, dense: bool = False
) -> tuple[list[bytes], datetime]:
    """Hours of serving. Dense: four DP ranks whose pool is full, so about 1.5% of the lines
    are retractions and 0.5% `Cache flushed` (one line in ~50 is not a stats or access line)."""
    chunks: list[bytes] = []
    size = 0
    ranks = DENSE_RANKS if dense else SPARSE_RANKS
    usage = {dp: 0.3 for dp, _ in ranks}
    while size < target:
        t += timedelta(milliseconds=rng.randint(200, 900))
        lines = []
        for dp, rank in ranks:
            if dense:
                if rng.random() < 0.0245:
                    lines.append(
                        f"[{ts(t)} {rank}] KV cache pool is full. Retract requests. "
                        f"#retracted_reqs: {rng.randint(1, 4)}, #new_tokens_gained: "
                        f"{rng.randint(500, 9000)}, #new_token_ratio: 0.4012 -> 0.5513\n"
                    )
                if rng.random() < 0.0083:
                    lines.append(f"[{ts(t)} {rank}] Cache flushed successfully!\n")
            usage[dp] = min(max(usage[dp] + rng.uniform(-0.03, 0.03), 0.05), 0.99)
            tokens = int(usage[dp] * TOKENS)
            running = rng.randint(40, 256)
            queue = rng.randint(0, 40)
            lines.append(
                f"[{ts(t)} {rank}] Decode batch, #running-req: {running}, #token: {tokens}, "
                f"token usage: {usage[dp]:.2f}, cuda graph: True, gen throughput (token/s): "
                f"{rng.uniform(2000, 6000):.2f}, #queue-req: {queue}\n"
            )
            if rng.random() < 0.25:
                lines.append(
                    f"[{ts(t)} {rank}] Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: "
                    f"{rng.randint(100, 8192)}, #cached-token: {rng.randint(0, 4000)}, token usage: "
                    f"{usage[dp]:.2f}, #running-req: {running}, #queue-req: {queue}, cuda graph: False, "
                    f"input throughput (token/s): {rng.uniform(1000, 9000):.2f}\n"
                )
            if usage[dp] > 0.97 and rng.random() < 0.01:
                lines.append(
                    f"[{ts(t)} {rank}] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                    f"#new_tokens_gained: {rng.randint(500, 9000)}, #new_token_ratio: 0.4012 -> 0.5513\n"
                )
                if rng.random() < 0.05:  # the rare warning: even one request did not fit
                    lines.append(
                        f"[{ts(t)} {rank}] retract_decode: aborted last request "
                        f"{rng.getrandbits(128):032x} due to OOM\n"
                    )
        for _ in range(rng.randint(0, 3)):
            lines.append(
                f"[{ts(t)}] INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 65000)} "
                '- "POST /v1/chat/completions HTTP/1.1" 200\n'
            )
        data = "".join(lines).encode()
        chunks.append(data)
        size += len(data)
    return chunks, t


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    suffix = text[-1].upper()
    return int(float(text[:-1]) * units[suffix]) if suffix in units else int(text)


def write(
    out: Path, target_bytes: int | None = None, target_lines: int | None = None, dense: bool = False
) -> None:
    """Startup, serving until the target size (bytes or lines) is nearly reached, the crash."""
    rng = random.Random(20260314)
    head = "".join(startup(START)).encode()
    with out.open("wb") as fh:
        fh.write(head)
        written, lines = len(head), head.count(b"\n")
        tail_lines = TAIL.count("\n")
        t = START + timedelta(minutes=3)
        while True:
            if target_lines is not None:
                room = target_lines - tail_lines - lines
                if room <= 0:
                    break
                chunks, t = serving(rng, t, 1, dense)
                data = b"".join(chunks)
                data = b"".join(data.splitlines(keepends=True)[:room])
            else:
                assert target_bytes is not None
                if written >= target_bytes - 4096:
                    break
                chunks, t = serving(rng, t, min(8 << 20, target_bytes - 4096 - written), dense)
                data = b"".join(chunks)
            fh.write(data)
            written += len(data)
            lines += data.count(b"\n")
        fh.write(TAIL.format(t=ts(t + timedelta(seconds=1))).encode())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("size", help="bytes to write, like 10M or 1G; or a line count with --lines")
    parser.add_argument("out", type=Path)
    parser.add_argument("--lines", action="store_true", help="SIZE is a number of lines")
    parser.add_argument("--dense", action="store_true", help="four DP ranks, a full pool")
    args = parser.parse_args()
    if args.lines:
        write(args.out, target_lines=int(args.size), dense=args.dense)
    else:
        write(args.out, target_bytes=parse_size(args.size), dense=args.dense)
    return 0


if __name__ == "__main__":
    sys.exit(main())
