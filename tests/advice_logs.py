"""Short logs for the advice tests (tests/test_advice.py), in the exact line formats of the fixtures.

The lines are copied from the fixture named above each log, with the numbers changed (so the hand
calculations in the tests work from numbers no sidecar already states) and long lines trimmed
(server_args keep the fields that matter; tracebacks keep the frames that place the failure).
UNKNOWN_ENGINE_OOM's two application frames are made up, so that nothing in it names an engine.
The tests write each log to a temporary file and read it with the real pipeline.
"""

from __future__ import annotations

# -- SGLang pieces (fixtures/sglang-0.5.10/cotenant-foreign-process-runtime.log) ----------------

#: The scheduler traceback of a forward OOM, down to the MLP's linear layer (site "forward").
_SG_FORWARD_FRAMES = """\
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3616, in run_scheduler_process
    scheduler.run_event_loop()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1361, in event_loop_overlap
    batch_result = self.run_batch(batch)
                   ^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tp_worker.py", line 469, in forward_batch_generation
    out = self.model_runner.forward(
          ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2739, in forward
    output = self._forward_raw(
             ^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2849, in _forward_raw
    ret, can_run_graph = self.forward_extend(
                         ^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2676, in forward_extend
    self.model.forward(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen2.py", line 482, in forward
    hidden_states = self.model(
                    ^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen2.py", line 257, in forward
    hidden_states = self.mlp(hidden_states)
                    ^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen2.py", line 98, in forward
    gate_up, _ = self.gate_up_proj(x)
                 ^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/linear.py", line 460, in forward
    output_parallel = self.quant_method.apply(self, input_, bias)
                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/quantization/unquant.py", line 99, in apply
    return F.linear(x, layer.weight, bias)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""


def _sg_oom(requested: str, free: str, process: str, extra: str = "") -> str:
    """torch's OOM message as SGLang 0.5.10 logs it (sizes as printed, with their units)."""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU 0 has a "
        f"total capacity of 79.19 GiB of which {free} is free. {extra}Including non-PyTorch "
        f"memory, this process has {process} memory in use. Of the allocated memory 57.47 GiB is "
        "allocated by PyTorch, with 450.56 MiB allocated in private pools (e.g., CUDA Graphs), and "
        "133.12 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)\n"
    )


def _sg_args(y: str, chunked: str = "8192", running: str = "None") -> str:
    return (
        "[2026-03-18 16:05:09] server_args=ServerArgs(model_path='Qwen/Qwen2.5-32B-Instruct', "
        "tokenizer_path='Qwen/Qwen2.5-32B-Instruct', tokenizer_mode='auto', context_length=None, "
        f"kv_cache_dtype='auto', mem_fraction_static={y}, max_running_requests={running}, "
        f"chunked_prefill_size={chunked}, max_prefill_tokens=16384, schedule_conservativeness=1.0, "
        "page_size=1, tp_size=1, pp_size=1, cuda_graph_max_bs=None, disable_cuda_graph=False)\n"
    )


#: The 0.5.10 startup of a card with pre 78.00 / post 18.00 GiB and a KV line for y 0.85:
#: KV = 18.00 − 0.15 × 78.00 = 6.30 GiB = 3.15 + 3.15; 25804 tokens → 262,144 B/token.
_SG_SERVED_085 = """\
[2026-03-18 16:05:19] Init torch distributed begin.
[2026-03-18 16:05:19] Init torch distributed ends. elapsed=0.38 s, mem usage=0.00 GB
[2026-03-18 16:05:19] Load weight begin. avail mem=78.00 GB
[2026-03-18 16:05:34] Load weight end. elapsed=15.22 s, type=Qwen2ForCausalLM, avail mem=18.00 GB, mem usage=60.00 GB.
[2026-03-18 16:05:34] KV Cache is allocated. #tokens: 25804, K size: 3.15 GB, V size: 3.15 GB
[2026-03-18 16:05:34] Memory pool end. avail mem=11.57 GB
[2026-03-18 16:05:43] Capture cuda graph end. Time elapsed: 7.62 s. mem usage=0.92 GB. avail mem=10.65 GB.
[2026-03-18 16:05:44] max_total_num_tokens=25804, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=4096, available_gpu_mem=10.62 GB
[2026-03-18 16:05:46] The server is fired up and ready to roll!
[2026-03-18 16:06:26] Decode batch, #running-req: 6, #token: 2580, token usage: 0.10, cuda graph: True, gen throughput (token/s): 212.36, #queue-req: 0
[2026-03-18 16:08:35] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 611, token usage: 0.10, #running-req: 2, #queue-req: 1, cuda graph: False, input throughput (token/s): 5127.64
"""

#: A runtime forward OOM, the server's own numbers complete: y 0.85, pre 78.00, post 18.00,
#: 262,144 B/token, context 4096; it asked for 2.50 GiB with 512.00 MiB free of 79.19 GiB.
SG_RUNTIME_OOM = (
    _sg_args("0.85")
    + _SG_SERVED_085
    + "[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):\n"
    + _SG_FORWARD_FRAMES
    + _sg_oom("2.50 GiB", "512.00 MiB", "78.38 GiB")
    + "\n[2026-03-18 16:08:36] SIGQUIT received. signum=3, frame=<frame at 0x7f2d1c8e3d40, file "
    "'/usr/lib/python3.12/asyncio/runners.py', line 118, code run>. It usually means one child "
    "failed.\n"
)

#: The same OOM beside another process: `Process 99123 has 20.00 GiB memory in use`.
SG_COTENANT_OOM = (
    _sg_args("0.85")
    + _SG_SERVED_085
    + "[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):\n"
    + _SG_FORWARD_FRAMES
    + _sg_oom("2.50 GiB", "512.00 MiB", "58.38 GiB", "Process 99123 has 20.00 GiB memory in use. ")
)

#: A runtime OOM with no sizes (fixtures/sglang-0.4.10/runtime-cuda-error-oom.log's message):
#: y 0.88, pre 78.00, post 18.00, KV 18.00 − 0.12 × 78.00 = 8.64 GiB = 35389 tokens × 262,144 B.
SG_RUNTIME_OOM_NO_SIZES = (
    _sg_args("0.88", running="48")
    + """\
[2026-03-18 16:05:19] Init torch distributed ends. elapsed=0.38 s, mem usage=0.00 GB
[2026-03-18 16:05:19] Load weight begin. avail mem=78.00 GB
[2026-03-18 16:05:34] Load weight end. elapsed=15.22 s, type=Qwen2ForCausalLM, avail mem=18.00 GB, mem usage=60.00 GB.
[2026-03-18 16:05:34] KV Cache is allocated. #tokens: 35389, K size: 4.32 GB, V size: 4.32 GB
[2026-03-18 16:05:46] The server is fired up and ready to roll!
[2026-03-18 16:08:35] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 611, token usage: 0.10, #running-req: 2, #queue-req: 1, cuda graph: False, input throughput (token/s): 5127.64
[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):
"""
    + _SG_FORWARD_FRAMES
    + "RuntimeError: CUDA error: out of memory\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
)

#: The same forward OOM with its sizes but nothing else: no server_args, no `Load weight` lines.
SG_RUNTIME_OOM_BARE = (
    "[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):\n"
    + _SG_FORWARD_FRAMES
    + _sg_oom("2.50 GiB", "512.00 MiB", "78.38 GiB")
)

#: A forward OOM with nothing to size anything by: no server_args, no memory lines, no sizes.
SG_RUNTIME_OOM_NOTHING = (
    "[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):\n"
    + _SG_FORWARD_FRAMES
    + "RuntimeError: CUDA error: out of memory\n"
)

# -- SGLang startup (fixtures/sglang-0.5.2/worked-example-y070.log) -----------------------------

_SG_KV_ERROR = """\
[2025-09-22 08:14:53] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2587, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 250, in __init__
    self.initialize(min_per_gpu_memory)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 378, in initialize
    self.init_memory_pool(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1317, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.

[2025-09-22 08:14:53] Received sigquit from a child process. It usually means the child failed.
"""

#: No KV pool at start: y 0.60, pre 70.00, post 20.00 (weights 50.00), TP1, the 0.4.6–0.5.2 lines.
SG_STARTUP_KV = (
    "[2025-09-22 08:14:03] server_args=ServerArgs(model_path='/models/Qwen2.5-32B-Instruct', "
    "tokenizer_path='/models/Qwen2.5-32B-Instruct', context_length=None, kv_cache_dtype='auto', "
    "mem_fraction_static=0.6, max_running_requests=None, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, page_size=1, tp_size=1, pp_size=1, cuda_graph_max_bs=None, "
    "disable_cuda_graph=False)\n"
    """\
[2025-09-22 08:14:13] Init torch distributed begin.
[2025-09-22 08:14:14] Init torch distributed ends. mem usage=0.00 GB
[2025-09-22 08:14:14] Load weight begin. avail mem=70.00 GB
[2025-09-22 08:14:53] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=20.00 GB, mem usage=50.00 GB.
""" + _SG_KV_ERROR
)

#: The same refusal with nothing around it: no server_args, no `Load weight` lines.
SG_STARTUP_KV_BARE = _SG_KV_ERROR

# -- SGLang retraction (fixtures/sglang-0.5.10/retraction-only.log) -----------------------------

#: 24 retractions in 23 minutes (≥ 20: pressured), max_running_requests 64, 262,144 B/token:
#: pre 78.00, post 18.00, y 0.85 as above; headroom after startup 10.62 GiB.
SG_RETRACTION = (
    _sg_args("0.85", running="64")
    + _SG_SERVED_085
    + "".join(
        f"[2026-03-18 16:{10 + i:02d}:00] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 1, #new_tokens_gained: 1890, #new_token_ratio: 0.1943 -> 0.2563\n"
        for i in range(24)
    )
)

# -- vLLM V0 startup (fixtures/vllm-0.7.3/startup-no-kv-blocks.log) -----------------------------

_VL0_ARGS = (
    "INFO 03-10 09:12:33 api_server.py:913] args: Namespace(subparser='serve', "
    "model_tag='meta-llama/Llama-3.1-70B-Instruct', host='0.0.0.0', port=8000, "
    "model='meta-llama/Llama-3.1-70B-Instruct', tokenizer=None, dtype='auto', "
    "kv_cache_dtype='auto', max_model_len=8192, pipeline_parallel_size=1, "
    "tensor_parallel_size=2, block_size=None, swap_space=4, cpu_offload_gb=0, "
    "gpu_memory_utilization=0.8, max_num_batched_tokens=None, max_num_seqs=None, "
    "quantization=None, enforce_eager=False, max_seq_len_to_capture=8192, "
    "limit_mm_per_prompt=None, mm_processor_kwargs=None, enable_sleep_mode=False)\n"
)

_VL0_NO_BLOCKS = """\
ERROR 03-10 09:14:42 engine.py:400] No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
ERROR 03-10 09:14:42 engine.py:400] Traceback (most recent call last):
ERROR 03-10 09:14:42 engine.py:400]   File "/opt/conda/envs/vllm/lib/python3.12/site-packages/vllm/worker/worker.py", line 291, in initialize_cache
ERROR 03-10 09:14:42 engine.py:400]     raise_if_cache_size_invalid(num_gpu_blocks,
ERROR 03-10 09:14:42 engine.py:400]   File "/opt/conda/envs/vllm/lib/python3.12/site-packages/vllm/worker/worker.py", line 539, in raise_if_cache_size_invalid
ERROR 03-10 09:14:42 engine.py:400]     raise ValueError("No available memory for the cache blocks. "
ERROR 03-10 09:14:42 engine.py:400] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
"""

#: No KV cache fits at start: u 0.80 of 79.15 GiB = 63.32 GiB; weights 62.00 + non-torch 0.68 +
#: activations 1.80 leave −1.16 GiB; `# CPU blocks: 1638` of the 4 GiB swap space, 16-token blocks.
VL_STARTUP_NO_KV = (
    "INFO 03-10 09:12:33 api_server.py:912] vLLM API server version 0.7.3\n"
    + _VL0_ARGS
    + """\
INFO 03-10 09:14:29 model_runner.py:1115] Loading model weights took 62.0000 GB
INFO 03-10 09:14:39 worker.py:267] Memory profiling takes 6.84 seconds
INFO 03-10 09:14:39 worker.py:267] the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.80) = 63.32GiB
INFO 03-10 09:14:39 worker.py:267] model weights take 62.00GiB; non_torch_memory takes 0.68GiB; PyTorch activation peak memory takes 1.80GiB; the rest of the memory reserved for KV Cache is -1.16GiB.
INFO 03-10 09:14:42 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 1638
INFO 03-10 09:14:42 executor_base.py:116] Maximum concurrency for 8192 tokens per request: 0.00x
"""
    + _VL0_NO_BLOCKS
)

#: The same refusal and nothing else: no args, no profiling lines.
VL_STARTUP_NO_KV_BARE = "INFO 03-10 09:12:33 api_server.py:912] vLLM API server version 0.7.3\n" + (
    _VL0_NO_BLOCKS
)

# -- vLLM V1 (fixtures/vllm-0.10.1/runtime-forward-oom.log, startup-free-memory-cotenant.log) --

_VL1_HEAD = """\
(APIServer pid=1) INFO 09-03 14:02:14 [api_server.py:1805] vLLM API server version 0.10.1.1
(APIServer pid=1) INFO 09-03 14:02:14 [utils.py:326] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'gpu_memory_utilization': 0.9, 'max_num_seqs': 128}
(APIServer pid=1) INFO 09-03 14:02:21 [__init__.py:1750] Using max model len 131072
(APIServer pid=1) INFO 09-03 14:02:22 [scheduler.py:222] Chunked prefill is enabled with max_num_batched_tokens=8192.
(EngineCore_0 pid=251) INFO 09-03 14:02:35 [gpu_model_runner.py:2007] Model loading took 14.9889 GiB and 2.796305 seconds
(EngineCore_0 pid=251) INFO 09-03 14:03:15 [gpu_worker.py:276] Available KV cache memory: 50.00 GiB
(EngineCore_0 pid=251) INFO 09-03 14:03:15 [kv_cache_utils.py:849] GPU KV cache size: 409,600 tokens
(EngineCore_0 pid=251) INFO 09-03 14:03:15 [kv_cache_utils.py:853] Maximum concurrency for 131,072 tokens per request: 3.12x
(EngineCore_0 pid=251) INFO 09-03 14:03:21 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, took 0.56 GiB
(APIServer pid=1) INFO:     Application startup complete.
"""

_VL1_FRAMES = """\
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] EngineCore encountered a fatal error.
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] Traceback (most recent call last):
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 693, in run_engine_core
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]     engine_core.run_busy_loop()
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 288, in step
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]     model_output = self.execute_model_with_error_logging(
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 362, in execute_model
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]     output = self.model_runner.execute_model(scheduler_output,
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1611, in execute_model
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]     model_output = self.model(
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py", line 577, in forward
(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702]     model_output = self.model(input_ids, positions, intermediate_tensors,
"""


def _vl_oom(requested: str, free: str, process: str, extra: str = "") -> str:
    return (
        "(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] torch.OutOfMemoryError: CUDA "
        f"out of memory. Tried to allocate {requested}. GPU 0 has a total capacity of 79.19 GiB of "
        f"which {free} is free. {extra}Including non-PyTorch memory, this process has {process} "
        "memory in use. Of the allocated memory 76.12 GiB is allocated by PyTorch, with 566.00 MiB "
        "allocated in private pools (e.g., CUDA Graphs), and 1.64 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    )


#: A serving OOM: u 0.90, KV 50.00 GiB = 409,600 tokens (131,072 B/token), max_model_len 131072,
#: max_num_seqs 128, max_num_batched_tokens 8192; it asked for 1.00 GiB with 256.00 MiB free.
VL_RUNTIME_OOM = _VL1_HEAD + _VL1_FRAMES + _vl_oom("1.00 GiB", "256.00 MiB", "78.60 GiB")

#: The same OOM beside another process: `Process 4711 has 12.00 GiB memory in use`.
VL_COTENANT_OOM = (
    _VL1_HEAD
    + _VL1_FRAMES
    + _vl_oom("1.00 GiB", "256.00 MiB", "66.60 GiB", "Process 4711 has 12.00 GiB memory in use. ")
)

#: The same OOM with nothing around it: no args, no profiling or KV lines.
VL_RUNTIME_OOM_BARE = (
    "(APIServer pid=1) INFO 09-03 14:02:14 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
    + _VL1_FRAMES
    + _vl_oom("1.00 GiB", "256.00 MiB", "78.60 GiB")
)

_VL1_FREE_CHECK = """\
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700] EngineCore failed to start.
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700] Traceback (most recent call last):
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 691, in run_engine_core
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700]     engine_core = EngineCoreProc(*args, **kwargs)
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 179, in init_device
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700]     raise ValueError(
(EngineCore_0 pid=121) ERROR 09-02 11:04:08 [core.py:700] ValueError: Free memory on device (30.50/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
"""

#: vLLM's start-up check: 30.50 of 79.19 GiB free, u 0.9 asks for 71.27 GiB.
VL_STARTUP_FREE = (
    "(APIServer pid=1) INFO 09-02 11:03:51 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
    "(APIServer pid=1) INFO 09-02 11:03:51 [utils.py:326] non-default args: {'model_tag': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', "
    "'max_model_len': 32768}\n" + _VL1_FREE_CHECK
)

# -- weights that do not fit (fixtures/sglang-0.5.10/weights-oom-tp1.log) -----------------------

_SG_LOAD_FRAMES = """\
[2026-03-12 09:41:07] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3600, in run_scheduler_process
    scheduler = Scheduler(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 507, in initialize
    self.load_model()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1159, in load_model
    self.model = self.loader.load_model(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_loader/loader.py", line 683, in load_model
    model = _initialize_model(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/llama.py", line 87, in __init__
    self.down_proj = RowParallelLinear(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/quantization/unquant.py", line 119, in create_weights
    torch.empty(
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_device.py", line 103, in __torch_function__
    return func(*args, **kwargs)
"""

_SG_LOAD_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 250.00 MiB is free. Including non-PyTorch memory, this process "
    "has 78.64 GiB memory in use. Of the allocated memory 77.60 GiB is allocated by PyTorch, and "
    "6.12 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)

#: 77.60 GiB of weights allocated when the 77.90 GiB free before loading ran out, TP2.
SG_WEIGHTS_OOM = (
    "[2026-03-12 09:40:51] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', "
    "tokenizer_path='meta-llama/Llama-3.1-70B-Instruct', context_length=8192, "
    "mem_fraction_static=0.9, chunked_prefill_size=8192, tp_size=2, pp_size=1)\n"
    "[2026-03-12 09:41:01] Init torch distributed ends. elapsed=0.41 s, mem usage=0.00 GB\n"
    "[2026-03-12 09:41:01] Load weight begin. avail mem=77.90 GB\n" + _SG_LOAD_FRAMES + _SG_LOAD_OOM
)

#: The same OOM with no server_args and no `Load weight begin` line.
SG_WEIGHTS_OOM_BARE = _SG_LOAD_FRAMES + _SG_LOAD_OOM

#: vLLM V0 running out while it loads the weights, TP2 in the args.
VL_WEIGHTS_OOM = (
    "INFO 03-10 09:12:33 api_server.py:912] vLLM API server version 0.7.3\n"
    + _VL0_ARGS
    + """\
INFO 03-10 09:12:52 model_runner.py:1110] Starting to load model meta-llama/Llama-3.1-70B-Instruct...
ERROR 03-10 09:13:40 engine.py:400] CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 250.00 MiB is free. Including non-PyTorch memory, this process has 78.60 GiB memory in use. Of the allocated memory 77.60 GiB is allocated by PyTorch, and 6.12 MiB is reserved by PyTorch but unallocated.
ERROR 03-10 09:13:40 engine.py:400] Traceback (most recent call last):
ERROR 03-10 09:13:40 engine.py:400]   File "/opt/conda/envs/vllm/lib/python3.12/site-packages/vllm/worker/model_runner.py", line 1112, in load_model
ERROR 03-10 09:13:40 engine.py:400]     self.model = get_model(vllm_config=self.vllm_config)
ERROR 03-10 09:13:40 engine.py:400]   File "/opt/conda/envs/vllm/lib/python3.12/site-packages/vllm/model_executor/model_loader/loader.py", line 406, in load_model
ERROR 03-10 09:13:40 engine.py:400]     model = _initialize_model(vllm_config=vllm_config)
ERROR 03-10 09:13:40 engine.py:400] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 250.00 MiB is free. Including non-PyTorch memory, this process has 78.60 GiB memory in use. Of the allocated memory 77.60 GiB is allocated by PyTorch, and 6.12 MiB is reserved by PyTorch but unallocated.
"""
)

# -- KV slots (fixtures/sglang-0.4.6/logical-decode-oom.log, vllm-0.11.0/kvcached-...log) ------

_SG_DECODE_OOM_FRAMES = """\
[2025-05-22 16:25:08] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2311, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1488, in get_new_batch_prefill
    self.running_batch.prepare_for_decode()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/schedule_batch.py", line 1501, in prepare_for_decode
    self.out_cache_loc = self.alloc_token_slots(bs)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/schedule_batch.py", line 946, in alloc_token_slots
    raise RuntimeError(error_msg)
"""


def _sg_decode_oom(need: int, available: int) -> str:
    return (
        _SG_DECODE_OOM_FRAMES
        + "RuntimeError: Decode out of memory. Try to lower your batch size.\n"
        f"Try to allocate {need} tokens.\nAvailable tokens: {available}\n\n"
    )


_SG_ARGS_046 = (
    "[2025-05-22 16:10:02] server_args=ServerArgs(model_path='Qwen/Qwen2.5-14B-Instruct', "
    "tokenizer_path='Qwen/Qwen2.5-14B-Instruct', mem_fraction_static=0.88, "
    "max_running_requests=64, chunked_prefill_size=8192, page_size=1, tp_size=1)\n"
)

#: The KV pool had 17 free slots when a decode step needed 52; max_running_requests 64.
SG_KV_SLOTS = _SG_ARGS_046 + _sg_decode_oom(52, 17)

#: 16 slots asked while 4096 were free: the allocator's own bug, not a full pool.
SG_KV_SLOTS_ALLOCATOR_BUG = _SG_ARGS_046 + _sg_decode_oom(16, 4096)

#: The same failure with no server_args and no slot counts.
SG_KV_SLOTS_BARE = (
    _SG_DECODE_OOM_FRAMES + "RuntimeError: Decode out of memory. Try to lower your batch size.\n"
)

_VL_KVCACHED = """\
(EngineCore_DP0 pid=212) [kvcached][WARNING][2026-06-17 14:22:05][kv_cache_manager.py:243] available_size()=5 < need_size=30
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710] Traceback (most recent call last):
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 283, in step
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710]     scheduler_output = self.scheduler.schedule()
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_manager.py", line 288, in allocate_slots
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710]     new_blocks = self.coordinator.allocate_new_blocks(
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/kvcached/integration/vllm/patches.py", line 500, in get_new_blocks
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710]     raise ValueError(
(EngineCore_DP0 pid=212) ERROR 06-17 14:22:05 [core.py:710] ValueError: Unable to allocate KV cache blocks from physical pool; requested=30, available=5
"""

#: kvcached's pool had 5 free pages when a step needed 30; max_num_seqs 96.
VL_KV_SLOTS = (
    "(APIServer pid=1) INFO 06-17 14:20:14 [api_server.py:1805] vLLM API server version 0.11.0\n"
    "(APIServer pid=1) INFO 06-17 14:20:14 [utils.py:326] non-default args: {'model': "
    "'Qwen/Qwen2.5-7B-Instruct', 'max_num_seqs': 96}\n" + _VL_KVCACHED
)

#: The same failure with no args line.
VL_KV_SLOTS_BARE = _VL_KVCACHED

# -- no engine markers at all ----------------------------------------------------------------

#: A bare PyTorch OOM traceback: nothing says which server wrote it.
UNKNOWN_ENGINE_OOM = """\
Traceback (most recent call last):
  File "/app/serve.py", line 88, in generate
    out = model(input_ids)
  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1775, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.38 GiB memory in use. Of the allocated memory 76.12 GiB is allocated by PyTorch, and 1.64 GiB is reserved by PyTorch but unallocated.
"""

#: One allocation of 120.00 GiB on a 79.19 GiB card, from a served SGLang 0.5.10 (y 0.85).
SG_OVERSIZED_OOM = (
    _sg_args("0.85")
    + _SG_SERVED_085
    + "[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):\n"
    + _SG_FORWARD_FRAMES
    + _sg_oom("120.00 GiB", "9.81 GiB", "69.07 GiB")
)

#: The same oversized allocation in a vLLM V1 log (u 0.90).
VL_OVERSIZED_OOM = _VL1_HEAD + _VL1_FRAMES + _vl_oom("120.00 GiB", "9.81 GiB", "69.07 GiB")

# -- more SGLang cases -----------------------------------------------------------------------

#: No fraction fits (0.5.10 lines, like fixtures/sglang-0.5.10/startup-kv-cotenant-notebook.log):
#: y 0.75, pre 50.00, post 10.00 (weights 40.00), chunked prefill 8192, TP1.
SG_STARTUP_KV_EMPTY_WINDOW = (
    _sg_args("0.75")
    + """\
[2026-04-22 15:41:13] Init torch distributed begin.
[2026-04-22 15:41:13] Init torch distributed ends. elapsed=0.24 s, mem usage=0.06 GB
[2026-04-22 15:41:14] Load weight begin. avail mem=50.00 GB
[2026-04-22 15:42:31] Load weight end. elapsed=77.12 s, type=Qwen2ForCausalLM, avail mem=10.00 GB, mem usage=40.00 GB.
"""
    + _SG_KV_ERROR.replace(
        "--mem-fraction-static.\n",
        "--mem-fraction-static. Current value: mem_fraction_static=0.75\n",
    )
)

#: SG_RUNTIME_OOM's server, but the forward asked for 10.50 GiB: more than the KV floor allows.
SG_RUNTIME_OOM_FLOOR = (
    _sg_args("0.85")
    + _SG_SERVED_085
    + "[2026-03-18 16:08:36] Scheduler hit an exception: Traceback (most recent call last):\n"
    + _SG_FORWARD_FRAMES
    + _sg_oom("10.50 GiB", "512.00 MiB", "78.38 GiB")
)

#: CUDA-graph capture ran out, and the log has nothing else (fixtures/sglang-0.5.2/graph-capture-oom.log).
SG_GRAPH_CAPTURE_BARE = """\
Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2587, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 386, in initialize
    self.init_device_graphs()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1761, in init_device_graphs
    self.graph_runner = graph_runners[self.device](self)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 391, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 118.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 86.56 MiB is free. Including non-PyTorch memory, this process has 78.73 GiB memory in use. Of the allocated memory 77.84 GiB is allocated by PyTorch, with 2.19 GiB allocated in private pools (e.g., CUDA Graphs), and 215.04 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose

[2025-10-08 14:21:26] Received sigquit from a child process. It usually means the child failed.
"""

#: SG_RETRACTION's 24 retractions with nothing else: no server_args, no memory or stats lines.
SG_RETRACTION_BARE = "".join(
    f"[2026-03-18 16:{10 + i:02d}:00] KV cache pool is full. Retract requests. "
    "#retracted_reqs: 1, #new_tokens_gained: 1890, #new_token_ratio: 0.1943 -> 0.2563\n"
    for i in range(24)
)

# -- more vLLM cases -------------------------------------------------------------------------

#: VL_WEIGHTS_OOM without its args line: nothing says the tensor-parallel size.
VL_WEIGHTS_OOM_BARE = VL_WEIGHTS_OOM.replace(_VL0_ARGS, "")

_VL0_PREEMPTED = (
    "WARNING 03-14 {t} scheduler.py:1754] Sequence group cmpl-ce24d109577a4dc5931ea343e56fc7d7-45 "
    "is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
    "This can affect the end-to-end performance. Increase gpu_memory_utilization or "
    "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={n}\n"
)

#: Two V0 preemption warnings (vLLM prints one for the 1st and then every 50th preemption), u 0.92.
VL_PREEMPTION = (
    "INFO 03-14 08:29:52 api_server.py:912] vLLM API server version 0.7.3\n"
    + _VL0_ARGS.replace("gpu_memory_utilization=0.8", "gpu_memory_utilization=0.92")
    + _VL0_PREEMPTED.format(t="08:34:18", n=1)
    + _VL0_PREEMPTED.format(t="08:35:06", n=51)
)

#: The same warnings with no args line.
VL_PREEMPTION_BARE = (
    "INFO 03-14 08:29:52 api_server.py:912] vLLM API server version 0.7.3\n"
    + _VL0_PREEMPTED.format(t="08:34:18", n=1)
    + _VL0_PREEMPTED.format(t="08:35:06", n=51)
)

#: A V1 engine fault that is not exhaustion (illegal memory access), u 0.90.
VL_GPU_FAULT = (
    _VL1_HEAD
    + _VL1_FRAMES
    + "(EngineCore_0 pid=251) ERROR 09-03 14:06:07 [core.py:702] RuntimeError: CUDA error: an "
    "illegal memory access was encountered\n"
)

#: The host's OOM killer, and nothing else (fixtures/vllm-0.10.2/host-sigkill-137.log).
VL_HOST_KILL_BARE = """\
(APIServer pid=4471) INFO 02-03 11:05:50 [api_server.py:1805] vLLM API server version 0.10.2
/opt/launch/serve.sh: line 12:  4471 Killed                  vllm serve /models/Qwen2.5-14B-Instruct
Process exited with exit code 137 (SIGKILL)
"""

# -- SGLang Omni (fixtures/omni-0.1.9/thinker-kv-reject.log, placement-budget-exceeded.log) ------

#: One refused request and the launch command, no stage or memory lines.
OMNI_REJECT_BARE = """\
+ exec sgl-omni serve --model-path Qwen/Qwen3-Omni-30B-A3B-Instruct --text-only --port 8000 --thinker.engine.mem_fraction_static 0.80 --thinker.factory.max_seq_len 65536
[2026-06-09 09:58:31] Rejecting request 8f3e1c2a-4b7d-4e19-a0c6-5d2f9b71e334 before scheduling: Request requires more tokens than the thinker KV cache can hold (input_tokens=30000, max_new_tokens=4096, required_tokens=34096, kv_capacity=20000). Current mem_fraction_static is 0.800; try setting --thinker-mem-fraction-static higher.
"""

_OMNI_PLACEMENT_FRAMES = """\
+ exec sgl-omni serve --model-path Qwen/Qwen3-Omni-30B-A3B-Instruct --port 8000 --thinker.gpu_memory_fraction 0.90 --image_encoder.gpu_memory_fraction 0.25 --image_encoder.gpu 1
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang_omni/pipeline/mp_runner.py", line 731, in start
    prep = prepare_pipeline_runtime(
  File "/usr/local/lib/python3.12/dist-packages/sglang_omni/config/placement.py", line 186, in build_stage_placement_plan
    return StagePlacementPlanner(config).build(
  File "/usr/local/lib/python3.12/dist-packages/sglang_omni/config/placement.py", line 115, in validate_memory_budgets
    raise ValueError(
"""

#: The stages on GPU 1 declare 1.150 of it; the placement limit is 0.950.
OMNI_PLACEMENT = (
    _OMNI_PLACEMENT_FRAMES
    + "ValueError: GPU 1 total_gpu_memory_fraction=1.150 exceeds placement limit 0.950\n"
)

#: The capacity check instead: no fraction-vs-limit pair to quote.
OMNI_PLACEMENT_CAPACITY = (
    _OMNI_PLACEMENT_FRAMES
    + "ValueError: GPU 0 declared budgets exceed physical memory: fraction 0.920 of 140.40GiB plus "
    "total_reserve_bytes 12.00GiB = 141.17GiB. Lower the stage budgets or move a stage to another "
    "GPU.\n"
)

# -- static footprint: an OOM before the KV pool that no frame places --------------------------

_STATIC_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 272.00 MiB. GPU 0 has a total "
    "capacity of 23.53 GiB of which 118.44 MiB is free. Including non-PyTorch memory, this process "
    "has 23.39 GiB memory in use. Of the allocated memory 22.96 GiB is allocated by PyTorch, and "
    "41.55 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)

#: SGLang with TP2 in its args, the OOM message (no private pools: before capture).
SG_STATIC_OOM = (
    "[2025-09-14 10:11:20] server_args=ServerArgs(model_path='Qwen/Qwen2.5-32B-Instruct', "
    "tokenizer_path='Qwen/Qwen2.5-32B-Instruct', context_length=32768, "
    "mem_fraction_static=0.85, chunked_prefill_size=4096, tp_size=2, pp_size=1)\n" + _STATIC_OOM
)

#: vLLM V0 with TP2 in its args, the same message.
VL_STATIC_OOM = (
    "INFO 03-10 09:12:33 api_server.py:912] vLLM API server version 0.7.3\n"
    + _VL0_ARGS
    + "ERROR 03-10 09:13:40 engine.py:400] "
    + _STATIC_OOM
)
VL_STATIC_OOM_BARE = VL_STATIC_OOM.replace(_VL0_ARGS, "")
