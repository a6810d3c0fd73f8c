"""Which fact kinds are failures, and how they relate (one list, used by every stage)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: GPU out-of-memory texts; the bare ones carry no numbers and name their form.
BARE_OOM_FORMS: Mapping[str, str] = MappingProxyType(
    {
        "cuda_error_oom": "cuda_error",
        "cublas_oom": "cublas",
        "nccl_oom": "nccl",
        "triton_oom": "triton",
        "tms_oom": "tms",  # torch_memory_saver: cuMemCreate/cuMemMap returned out of memory
        "cumem_oom": "cumem",  # vLLM sleep mode: the cumem allocator could not map memory
        "tpu_oom": "tpu",  # XLA: the TPU's HBM ran out
    }
)
OOM_KINDS: frozenset[str] = frozenset({"cuda_oom", *BARE_OOM_FORMS})

#: Failures that are the memory story itself, in no particular order; the first one in the log
#: is what gets diagnosed.
MEMORY_KINDS: frozenset[str] = OOM_KINDS | {
    "startup_kv_error",
    "negative_profile",
    "tp_imbalance",
    "logical_kv_failure",
    "req_slot_failure",
    "graph_capture_failed",
    "host_oom_kill",
    "host_alloc_failure",
    "ray_oom_kill",  # Ray's memory monitor killed a worker: host RAM, not GPU
    "stage_load_negative",
    "startup_free_memory",
    "profiling_free_changed",
    "pool_leak",
    "sleep_not_released",
}
#: Failures that usually follow another one (a peer stuck in NCCL, a dead child, a wrapper that
#: says "see above").
CONSEQUENCE_KINDS: frozenset[str] = frozenset({"watchdog", "child_died", "consequence"})

#: Errors that are not GPU exhaustion and that a rule names (not_oom).
NAMED_ERROR_KINDS: frozenset[str] = frozenset(
    {
        "gpu_fault",
        "driver_error",
        "nccl_error",
        "triton_resources",
        "tpu_vmem",
        "tms_error",
        "cumem_error",
        "ray_worker_died",  # a Ray worker vanished; Ray names the kernel's OOM killer as one cause
    }
)
#: Evidence that an allocation was refused and retried: a failure only when nothing else is.
RETRY_KINDS: frozenset[str] = frozenset({"alloc_retry", "tms_retry"})

#: Every fact kind that is a failure of its own (everything else is context).
FAILURE_KINDS: frozenset[str] = (
    MEMORY_KINDS | CONSEQUENCE_KINDS | NAMED_ERROR_KINDS | RETRY_KINDS | {"omni_placement"}
)

#: Failures that can only happen while the server starts (whatever other lines say).
STARTUP_KINDS: frozenset[str] = frozenset(
    {
        "startup_kv_error",
        "negative_profile",
        "tp_imbalance",
        "stage_load_negative",
        "startup_free_memory",
        "profiling_free_changed",
        "omni_placement",
    }
)
