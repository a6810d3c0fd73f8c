"""SGLang and vLLM budgets rebuilt from short logs in the engines' own line formats (copied from
fixtures/sglang-0.5.2/worked-example-y085.log and fixtures/vllm-0.7.3, vllm-0.10.1).

Each number is checked against the hand calculation in the comment next to it (±0.01 GiB);
a log that lacks a line gives None and a notice, never 0 or a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.budget import sglang, vllm
from oomdoctor.judge import placed
from oomdoctor.model import Incident, SglangBudget, VllmBudget
from oomdoctor.rules.schema import Rule

GIB_TOL = 0.01

# --- SGLang 0.5.2: the worked example of DESIGN §2 (pre 78.00, post 18.00, weights 60.00) -------

SG_ARGS_070 = (
    "[2025-09-22 08:14:03] server_args=ServerArgs(model_path='/models/OLMo-2-0325-32B-Instruct', "
    "mem_fraction_static=0.7, tp_size=1, context_length=None, chunked_prefill_size=8192)"
)
SG_ARGS_085 = SG_ARGS_070.replace("mem_fraction_static=0.7", "mem_fraction_static=0.85")
SG_BEGIN = "[2025-09-22 08:14:14] Load weight begin. avail mem=78.00 GB"
SG_END = (
    "[2025-09-22 08:14:53] Load weight end. type=Olmo2ForCausalLM, dtype=torch.bfloat16, "
    "avail mem=18.00 GB, mem usage=60.00 GB."
)
SG_NOT_ENOUGH = """\
[2025-09-22 08:14:53] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1317, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
"""
SG_POOL = """\
[2025-09-22 08:32:29] KV Cache is allocated. #tokens: 25804, K size: 3.15 GB, V size: 3.15 GB
[2025-09-22 08:32:29] Memory pool end. avail mem=11.57 GB
[2025-09-22 08:32:30] Capture cuda graph begin. This can take up to several minutes. avail mem=11.57 GB
[2025-09-22 08:32:40] Capture cuda graph end. Time elapsed: 9.84 s. mem usage=0.92 GB. avail mem=10.65 GB.
[2025-09-22 08:32:41] max_total_num_tokens=25804, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=4096, available_gpu_mem=10.62 GB
[2025-09-22 08:32:44] The server is fired up and ready to roll!
"""
SG_LOGITS_OOM = """\
[2025-09-22 08:34:38] Prefill batch. #new-seq: 3, #new-token: 8192, #cached-token: 1288, token usage: 0.00, #running-req: 0, #queue-req: 11,
[2025-09-22 08:34:39] TpModelWorkerClient hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/logits_processor.py", line 375, in forward
    input_logprobs = logits[input_logprob_indices]
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.06 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.18 GiB is free. Including non-PyTorch memory, this process has 76.71 GiB memory in use. Of the allocated memory 70.35 GiB is allocated by PyTorch, and 4.48 GiB is reserved by PyTorch but unallocated.

[2025-09-22 08:34:39] Received sigquit from a child process. It usually means the child failed.
"""
SG_DECODES = """\
[2025-09-22 08:33:28] Decode batch. #running-req: 4, #token: 2589, token usage: 0.10, cuda graph: True, gen throughput (token/s): 118.42, #queue-req: 0,
[2025-09-22 08:33:29] Decode batch. #running-req: 40, #token: 12902, token usage: 0.50, cuda graph: True, gen throughput (token/s): 131.07, #queue-req: 0,
[2025-09-22 08:33:31] Decode batch. #running-req: 3, #token: 2336, token usage: 0.09, cuda graph: True, gen throughput (token/s): 129.88, #queue-req: 0,
"""


def _incident(tmp_path: Path, rules: tuple[Rule, ...], *parts: str) -> Incident:
    path = tmp_path / "server.log"
    path.write_text("\n".join(p.rstrip("\n") for p in parts) + "\n", encoding="utf-8")
    return placed(pipeline.read([str(path)], rules))[0]  # failures placed, as diagnose does


def _sglang(tmp_path: Path, rules: tuple[Rule, ...], *parts: str) -> SglangBudget:
    incident = _incident(tmp_path, rules, *parts)
    return sglang.build(incident, incident.primary)


def _close(value: float | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= GIB_TOL


def test_sglang_startup_kv_shortage_at_y070(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_ARGS_070, SG_BEGIN, SG_END, SG_NOT_ENOUGH)
    assert b.mem_fraction_static == 0.7
    assert b.mem_fraction_source == "server_args"
    assert _close(b.pre_gib, 78.00)
    assert _close(b.post_gib, 18.00)
    assert _close(b.weights_gib, 60.00)
    assert _close(b.static_gib, 54.60)  # 0.70 × 78
    assert _close(b.dynamic_gib, 23.40)  # 0.30 × 78
    assert _close(b.kv_gib, -5.40)  # 18 − 23.40
    assert b.y_zero is not None and abs(b.y_zero - 0.7692) < 1e-4  # 1 − 18/78
    # No pool was built: bytes per token unknown, so y_min is the empty-pool fraction.
    assert b.bytes_per_token is None
    assert b.window.low is not None and abs(b.window.low - 0.7692) < 1e-4
    # y_max from SGLang's own reserve table: ≥ 10 GB on a card over 60 GB (78 + 1.35 ≈ H100 80GB):
    # in SGLang's own terms, a share of the card: (81559/1024 − 10)/(81559/1024) = 0.8744.
    assert b.reserve_gib is not None and abs(b.reserve_gib - 10.0) < 1e-9
    assert b.window.high is not None and abs(b.window.high - 0.8744) < 1e-4
    assert b.window.empty is False
    assert b.capacity_gib is None  # no OOM message printed the card's size
    assert b.notices == ()


def test_sglang_runtime_oom_at_y085(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_ARGS_085, SG_BEGIN, SG_END, SG_POOL, SG_LOGITS_OOM)
    assert b.mem_fraction_static == 0.85
    assert _close(b.static_gib, 66.30)  # 0.85 × 78
    assert _close(b.dynamic_gib, 11.70)  # 0.15 × 78
    assert _close(b.kv_gib, 6.30)  # 18 − 11.70
    assert _close(b.kv_logged_gib, 6.30)  # K 3.15 + V 3.15
    assert b.kv_tokens == 25804
    # 6.29..6.31 GiB / 25804 tokens = 261738..262570 B: 2^18 = 262144
    assert b.bytes_per_token == 262144
    assert b.context_len == 4096
    assert _close(b.graph_gib, 0.92)
    assert _close(b.headroom_gib, 10.62)  # available_gpu_mem of the summary line
    assert _close(b.capacity_gib, 79.19)  # from the OOM message
    # y_min: one 4096-token request = 4096 × 262144 B = 1.00 GiB: 18/78 → 0.76923 + 1/78 = 0.78205
    assert b.window.low is not None and abs(b.window.low - 0.78205) < 1e-4
    # y_max: dynamic 11.70 was short by 3.06 − 2.18 = 0.88: reserve 12.58, 1 − 12.58/78 = 0.83872
    assert _close(b.reserve_gib, 12.58)
    assert b.window.high is not None and abs(b.window.high - 0.83872) < 1e-4
    assert b.window.high_basis is not None and "0.88 GiB" in b.window.high_basis
    assert b.notices == ()


def test_sglang_served_without_failing_keeps_half_the_headroom(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    b = _sglang(tmp_path, rules, SG_ARGS_085, SG_BEGIN, SG_END, SG_POOL, SG_DECODES)
    # y_min: the peak of 0.50 × 25804 = 12902 tokens × 262144 B = 12902/4096 = 3.1499 GiB
    # (more than one 4096-token request): 0.76923 + 3.1499/78 = 0.76923 + 0.04038 = 0.80961
    assert b.window.low is not None and abs(b.window.low - 0.80961) < 1e-4
    assert b.window.low_basis is not None and "12902 tokens" in b.window.low_basis
    # y_max: headroom 10.62, spare max(2, 10.62/2) = 5.31, y + (10.62 − 5.31)/78
    # = 0.85 + 0.06808 = 0.91808; reserve = 11.70 − 5.31 = 6.39
    assert b.window.high is not None and abs(b.window.high - 0.91808) < 1e-4
    assert _close(b.reserve_gib, 6.39)
    assert b.capacity_gib is None


def test_sglang_without_load_weight_begin(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_ARGS_085, SG_END, SG_POOL, SG_LOGITS_OOM)
    assert _close(b.pre_gib, 78.00)  # post + weights = 18 + 60
    assert _close(b.kv_gib, 6.30)  # 18 − 0.15 × 78
    assert any(
        "`Load weight begin` is not in the log" in n and "18.00 + 60.00" in n for n in b.notices
    )


def test_sglang_without_server_args_or_kv_line(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_BEGIN, SG_END, SG_NOT_ENOUGH)
    assert b.mem_fraction_static is None
    assert b.mem_fraction_source is None
    assert b.kv_gib is None and b.static_gib is None and b.dynamic_gib is None
    assert _close(b.pre_gib, 78.00) and _close(b.post_gib, 18.00)  # still measured
    assert b.y_zero is not None and abs(b.y_zero - 0.7692) < 1e-4  # needs no y: 1 − 18/78
    assert any("--mem-fraction-static" in n and "server_args" in n for n in b.notices)


def test_sglang_y_derived_from_the_kv_line(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_BEGIN, SG_END, SG_POOL, SG_LOGITS_OOM)
    # 1 − (post − KV)/pre = 1 − (18 − 6.30)/78 = 1 − 11.70/78 = 0.85
    assert b.mem_fraction_static == pytest.approx(0.85, abs=1e-9)
    assert b.mem_fraction_source is not None and "KV line" in b.mem_fraction_source
    assert _close(b.kv_gib, 6.30)


def test_sglang_without_load_weight_lines(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_ARGS_070, SG_NOT_ENOUGH)
    assert b.mem_fraction_static == 0.7
    assert (b.pre_gib, b.post_gib, b.weights_gib, b.kv_gib) == (None, None, None, None)
    assert (b.static_gib, b.dynamic_gib, b.y_zero) == (None, None, None)
    assert (b.window.low, b.window.high, b.window.empty) == (None, None, None)
    assert any("Load weight begin/end" in n for n in b.notices)


def test_sglang_with_only_load_weight_begin(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _sglang(tmp_path, rules, SG_ARGS_070, SG_BEGIN, SG_NOT_ENOUGH)
    assert _close(b.pre_gib, 78.00)
    assert _close(b.static_gib, 54.60)  # y·pre needs no post: 0.70 × 78
    assert (b.post_gib, b.weights_gib, b.kv_gib, b.y_zero) == (None, None, None, None)
    assert any("`Load weight begin/end` (the KV pool)" in n for n in b.notices)


# --- vLLM ---------------------------------------------------------------------------------------

V0_PROFILE = """\
INFO 03-18 14:06:50 model_runner.py:1115] Loading model weights took 32.8855 GB
INFO 03-18 14:07:04 worker.py:267] Memory profiling takes 12.03 seconds
INFO 03-18 14:07:04 worker.py:267] the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = 71.24GiB
INFO 03-18 14:07:04 worker.py:267] model weights take 32.89GiB; non_torch_memory takes 1.43GiB; PyTorch activation peak memory takes 4.61GiB; the rest of the memory reserved for KV Cache is 32.31GiB.
INFO 03-18 14:07:04 executor_base.py:111] # cuda blocks: 26469, # CPU blocks: 3276
INFO 03-18 14:07:04 executor_base.py:116] Maximum concurrency for 32768 tokens per request: 12.92x
INFO 03-18 14:07:27 model_runner.py:1562] Graph capturing finished in 22 secs, took 1.27 GiB
INFO 03-18 14:07:27 llm_engine.py:436] init engine (profile, create kv cache, warmup model) took 36.92 seconds
"""

V1_RUNTIME = """\
(APIServer pid=1) INFO 09-03 14:02:14 [api_server.py:1805] vLLM API server version 0.10.1.1
(APIServer pid=1) INFO 09-03 14:02:14 [utils.py:326] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'served_model_name': ['llama-3.1-8b'], 'gpu_memory_utilization': 0.95}
(APIServer pid=1) INFO 09-03 14:02:21 [__init__.py:1750] Using max model len 131072
(EngineCore_0 pid=251) INFO 09-03 14:02:35 [gpu_model_runner.py:2007] Model loading took 14.9889 GiB and 2.796305 seconds
(EngineCore_0 pid=251) INFO 09-03 14:03:15 [gpu_worker.py:276] Available KV cache memory: 58.80 GiB
(EngineCore_0 pid=251) INFO 09-03 14:03:15 [kv_cache_utils.py:849] GPU KV cache size: 481,712 tokens
(EngineCore_0 pid=251) INFO 09-03 14:03:15 [kv_cache_utils.py:853] Maximum concurrency for 131,072 tokens per request: 3.68x
(EngineCore_0 pid=251) INFO 09-03 14:03:21 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, took 0.56 GiB
(APIServer pid=1) INFO 09-03 14:03:22 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
(APIServer pid=1) INFO 09-03 14:05:40 [loggers.py:123] Engine 000: Avg prompt throughput: 5123.4 tokens/s, Avg generation throughput: 310.2 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.5%
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] EngineCore encountered a fatal error.
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] Traceback (most recent call last):
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 693, in run_engine_core
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]     engine_core.run_busy_loop()
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 291.94 MiB is free. Including non-PyTorch memory, this process has 78.60 GiB memory in use. Of the allocated memory 76.12 GiB is allocated by PyTorch, with 566.00 MiB allocated in private pools (e.g., CUDA Graphs), and 1.64 GiB is reserved by PyTorch but unallocated.
"""


def _vllm(
    tmp_path: Path, rules: tuple[Rule, ...], text: str, capacity_hint: float | None = None
) -> VllmBudget:
    incident = _incident(tmp_path, rules, text)
    assert incident.engine == "vllm"
    return vllm.build(incident, incident.primary, capacity_hint)


def test_vllm_v0_profile(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _vllm(tmp_path, rules, V0_PROFILE)
    assert b.gpu_memory_utilization == 0.9
    assert b.utilization_source == "the memory profiling line"
    assert _close(b.capacity_gib, 79.15)
    assert _close(b.budget_gib, 71.24)  # 79.15 × 0.90, as printed
    assert _close(b.weights_gib, 32.89)  # the profile's figure before the loader's 32.8855
    assert _close(b.activation_gib, 4.61)
    assert _close(b.non_torch_gib, 1.43)
    assert _close(b.kv_gib, 32.31)  # 71.24 − 32.89 − 1.43 − 4.61
    assert b.kv_tokens == 423504  # 26469 blocks × 16
    # 32.30..32.32 GiB / 423504 tokens = 81893..81944 B: 81920 = 5 × 2^14
    assert b.bytes_per_token == 81920
    assert b.max_model_len == 32768
    assert _close(b.kv_needed_gib, 2.50)  # 32768 × 81920 B = 2.5 × 2^30
    assert _close(b.graph_gib, 1.27)
    # u_min: u_zero = 0.90 − 32.31/79.15 = 0.49179; + 2.50/79.15 = 0.03159 → 0.52337 → up 0.53
    assert b.window.low == 0.53
    # u_max: outside = graphs 1.27 + context 1.35 + margin 1.0 = 3.62; 1 − 3.62/79.15 = 0.95426
    # → down 0.95
    assert b.window.high == 0.95
    assert b.window.empty is False
    assert b.notices == ()


def test_vllm_v1_runtime_oom(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    b = _vllm(tmp_path, rules, V1_RUNTIME)
    assert b.gpu_memory_utilization == 0.95
    assert b.utilization_source == "the engine arguments"
    assert _close(b.capacity_gib, 79.19)  # from the OOM message
    assert _close(b.budget_gib, 75.23)  # 79.19 × 0.95 = 75.2305
    assert _close(b.weights_gib, 14.99)  # 14.9889
    assert b.activation_gib is None and b.non_torch_gib is None  # INFO does not print them
    assert _close(b.kv_gib, 58.80)
    assert b.kv_tokens == 481712
    # 58.79..58.81 GiB / 481712 = 131045..131090 B: 2^17 = 131072
    assert b.bytes_per_token == 131072
    assert b.max_model_len == 131072
    assert _close(b.kv_needed_gib, 16.0)  # 131072 × 131072 B = 2^34 B = 16 GiB
    assert _close(b.graph_gib, 0.56)
    # u_min: 0.95 − 58.80/79.19 = 0.20748; + 16/79.19 = 0.20205 → 0.40953 → up 0.41
    assert b.window.low == 0.41
    # u_max: short = 448 MiB − 291.94 MiB = 0.4375 − 0.2851 = 0.1524 GiB;
    # 0.95 − (0.1524 + 1.0)/79.19 = 0.95 − 0.01455 = 0.93545 → down 0.93
    assert b.window.high == 0.93
    assert b.window.high_basis is not None and "0.15 GiB missing" in b.window.high_basis
    # budget − weights − KV = 75.2305 − 14.9889 − 58.80 = 1.4416
    assert any("DEBUG" in n and "1.44 GiB" in n for n in b.notices)


def test_vllm_without_profile_lines(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    text = "".join(
        line + "\n"
        for line in V0_PROFILE.splitlines()
        if "total_gpu_memory" not in line and "model weights take" not in line
    )
    b = _vllm(tmp_path, rules, text)
    assert b.gpu_memory_utilization is None
    assert b.capacity_gib is None and b.budget_gib is None
    assert b.activation_gib is None and b.non_torch_gib is None
    assert _close(b.weights_gib, 32.89)  # the loader's 32.8855 GB
    # Bytes per token from the CPU swap pool: 4 GiB / (3276 × 16) = 81941 B, 4 GiB / (3277 × 16)
    # = 81916 B: 81920 lies between.
    assert b.bytes_per_token == 81920
    # The KV cache is what `# cuda blocks` sized: 423504 × 81920 B = 34693447680 B = 32.3108 GiB
    assert _close(b.kv_gib, 32.31)
    assert (b.window.low, b.window.high) == (None, None)
    notices = " | ".join(b.notices)
    assert "--gpu-memory-utilization" in notices
    assert "total memory" in notices
    assert "423,504 tokens" in notices


def test_vllm_capacity_hint_fills_the_upper_bound(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    text = "".join(
        line + "\n"
        for line in V0_PROFILE.splitlines()
        if "total_gpu_memory" not in line and "model weights take" not in line
    )
    b = _vllm(tmp_path, rules, text, capacity_hint=79.15)
    assert _close(b.capacity_gib, 79.15)
    assert b.gpu_memory_utilization is None
    assert b.window.low is None  # needs u
    # 1 − (1.27 + 1.35 + 1.0)/79.15 = 0.95426 → down 0.95
    assert b.window.high == 0.95
    assert not any("total memory" in n for n in b.notices)
