"""Every feature a rule can name, with what it means (`oomdoctor rules features` prints them, and
the loader validates rule files against these names); rules/features.py computes them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

FEATURE_DOCS: Mapping[str, str] = MappingProxyType(
    {
        "engine": "sglang, sglang-omni, vllm, vllm-omni, vllm-ascend or null (cannot tell)",
        "engine.family": "sglang or vllm (whose flags the advice uses), or null",
        "recognised": "the input holds lines oomdoctor knows (an engine's, PyTorch's, a traceback)",
        "ready": "the server printed its ready line (SGLang's `fired up and ready to roll`, Omni's `the server is ready`)",
        "failure.present": "the log shows a failure of any kind",
        "failure.kind": "kind of the diagnosed failure (cuda_oom, startup_kv_error, ...)",
        "failure.phase": "startup, warmup, running or unknown",
        "failure.site": "where it failed: weights, kv_pool, graph_capture, encoder, logits, "
        "sampling, comm, forward, unknown",
        "failure.phase_strength": "how firmly the log says when it failed: 0 (nothing says) to 1 "
        "(in so many words); 0.45 is the OOM message's private-pool clue alone",
        "failure.phase_rival": "the phase a weaker source of the log says, when it disagrees",
        "failure.site_strength": "how firmly the log says where it failed: 0 to 1 (0.6: a name "
        "heuristic, 0.85: a known frame or text)",
        "failure.message": "the failure's message text",
        "failure.exit_code": "the exit code a died process reported (negative: killed by that "
        "signal; -9 is SIGKILL, the host OOM killer's)",
        "failure.ranks": "how many ranks printed the failure",
        "startup_kv.error": "SGLang refused to build the KV pool (not enough memory / negative profile)",
        "oom.present": "the diagnosed failure is a GPU out-of-memory (any form)",
        "oom.form": "pytorch, pytorch_legacy, cuda_error, cublas, nccl, triton",
        "oom.requested_gib": "the allocation that failed",
        "oom.free_gib": "free memory on the GPU at that moment",
        "oom.total_gib": "the GPU's capacity as PyTorch saw it",
        "oom.shortfall_gib": "requested − free",
        "oom.self_gib": "memory the failing process held",
        "oom.foreign_gib": "memory held by other processes that are not this server",
        "oom.sibling_gib": "memory held by sibling stages of the same pipeline (Omni)",
        "oom.unattributed_gib": "used memory no listed process accounts for",
        "oom.hidden_gib": "used memory held outside every listed process, beyond this process's own "
        "non-PyTorch allowance when the message does not size this process (0 bytes, no NVML, 1.x)",
        "oom.exceeds_card": "the single allocation is at least the GPU's whole capacity",
        "oom.exceeds_card_minus_weights": "the single allocation is at least the card minus the "
        "weights the server loaded: no fraction fits it beside them",
        "oom.free_covers_request": "the message shows far more memory free than was requested "
        "(twice the request and 4 GiB more)",
        "oom.foreign_may_be_stage": "a pipeline engine (SGLang Omni, vLLM-Omni) whose log names no stage "
        "PIDs: the other holders may be its own stages",
        "oom.foreign_explains": "the foreign holders alone account for the shortfall",
        "oom.self_holds_card": "the failing process holds nearly all used memory",
        "startup.step": "the last startup checkpoint the failing rank printed before the failure: "
        "load_begin, load_end, kv_allocated, pool_end, graph_begin, graph_end, or null",
        "capture.failed": "a CUDA-graph capture failed",
        "capture.reason_oom": "the capture failed for lack of memory",
        "tp_imbalance": "SGLang's TP memory-imbalance check fired",
        "retry.recovered": "after the last allocator retry warning the log goes on (stats, a ready "
        "line, other lines of the engine): the retried allocation succeeded",
        "logical_kv.failed": "the scheduler's KV-slot accounting failed (Prefill/Decode out of memory)",
        "logical_kv.tokens_were_available": "that failure reported enough available tokens",
        "retraction.count": "KV-pool retractions in the log",
        "retraction.per_hour": "retractions per hour over the span they cover",
        "stats.peak_token_usage": "highest `token usage` in the stats lines",
        "timeline.minutes_at_95": "minutes the stats lines show token usage at 0.95 or more",
        "timeline.span_minutes": "minutes between the first and the last stats line",
        "host.oom_kill": "a process was killed by the host OOM killer (exit −9)",
        "host.alloc_failure": "host memory allocation failed (Errno 12 and similar)",
        "gpu.fault": "a GPU error that is not exhaustion (illegal access, no kernel image, ...)",
        "omni.encoder_failed": "an Omni encoder stage failed or died",
        "omni.encoder_reserve_zero": "the Omni thinker ran with encoder_mem_reserve=0",
        "rl.colocated": "the server runs next to an RL trainer (memory saver, sleep mode, verl, slime, "
        "OpenRLHF)",
        "stack": "what runs around the engine, comma-separated (verl, torch_memory_saver, ray, ...)",
        "request.too_long": "a request was longer than the KV pool or context allows",
        "kv.below_context": "SGLang warned the KV pool is smaller than the context length",
        "gpu.available": "a GPU snapshot (live or from --snapshot) was read",
        "gpu.foreign_gib": "memory co-tenants hold on the server's (failing) GPU in the snapshot",
        "gpu.foreign_explains": "the snapshot's co-tenants account for the failure",
        "gpu.unattributed_gib": "used memory on a server GPU that no listed process accounts for",
        "gpu.snapshot_gap_s": "seconds from the log's last line to the snapshot",
        "cotenant.start_gap_gib": "capacity − pre − context overhead: memory held by others at start",
        "cotenant.start_gap_explains": "that memory, at y, would have covered the missing KV pool",
        "budget.kv_gib": "post − (1 − y)·pre",
        "budget.kv_negative": "that KV figure is ≤ 0",
        "budget.window_empty": "no --mem-fraction-static satisfies both KV need and runtime reserve",
        "budget.weights_share": "weights / pre",
        "vllm.cotenant_check": "vLLM's own check saw memory held or released by another process "
        "(free memory below the requested utilization at startup, or free memory that changed "
        "during profiling)",
        "vllm.profile_run_oom": "the OOM happened in vLLM's startup profile run (before the KV cache)",
        "vllm.mm_profile": "vLLM profiled a multimodal encoder (dummy images/videos/audio)",
        "vllm.startup_short_gib": "how much more vLLM's start-up check asked for than was free (GiB)",
        "vllm.startup_short_steps": "that shortfall in steps of --gpu-memory-utilization (0.01 × "
        "the card): below 1, lowering the flag by one step makes it fit, whoever holds the gap",
        "vllm.preemptions": "requests vLLM preempted for lack of KV cache space",
        "fact.<kind>": "how many facts of a kind were seen (e.g. fact.retraction)",
        "pattern.<rule id>.<name>": "how many lines a rule's own pattern matched",
    }
)
