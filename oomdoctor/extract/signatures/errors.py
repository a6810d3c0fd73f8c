"""Errors that say "memory" (or sit where memory failures sit) but are not GPU exhaustion, and the
wrappers that only say a failure happened somewhere else.

Each kind here is named by a rule that says what it is and what to do instead
(rules/*.toml, category not_oom), or is a consequence whose cause is elsewhere in the log.
Formats: sglang-logs.md §5.3, §5.5, §5.7, §10; pytorch-oom.md §5.4, §5.7; vllm-logs.md.
"""

from __future__ import annotations

import re

from oomdoctor.extract.signatures.base import Signature, sig
from oomdoctor.model import Scalar
from oomdoctor.units import gib_or_none, integer


def _in_gib(m: re.Match[str]) -> dict[str, Scalar]:
    """The allocator warning prints raw bytes; the rest of oomdoctor reads GiB."""
    return {
        "what": m.group("what"),
        "device": integer(m.group("device")),
        "requested_gib": _bytes_gib(m.group("bytes")),
        "device_free_gib": _bytes_gib(m.group("free")),
        "device_total_gib": _bytes_gib(m.group("total")),
    }


def _bytes_gib(text: str) -> float | None:
    count = integer(text)
    return gib_or_none(count / 2**30) if count is not None else None


def _vmem(m: re.Match[str]) -> dict[str, Scalar]:
    return {"what": m.group(0)[:120]}


SIGNATURES: tuple[Signature, ...] = (
    # --- the allocator retried: a warning, not a crash (torch 2.13+) ----------------------------
    sig(
        "alloc_retry",
        ("memory allocation failed with OOM on device", "memory mapping failed with OOM on device"),
        r"(?P<what>memory allocation|expandable_segments: memory mapping) failed with OOM on device "
        r"(?P<device>\d+) while trying to (?:allocate|map) (?P<bytes>\d+) bytes \(free: "
        r"(?P<free>\d+), total: (?P<total>\d+)\)",
        _in_gib,
        description="PyTorch's caching allocator: one cudaMalloc (or page map) failed; it frees "
        "its cache and retries",
    ),
    # --- pool invariant checkers (accounting bugs, not exhaustion) -------------------------------
    sig(
        "pool_leak",
        (
            "leak detected",
            "Leak Detected",
            "KV double free",
            "KV page use-after-free",
        ),
        r"(?P<what>(?:token_to_kv_pool_allocator |req_to_token_pool |pool-bytes |pool |"
        r"KV cache pool |Memory pool )?(?:memory )?leak detected!?"
        r"|(?:Full Pool |SWA Pool )?Mem Leak Detected!?|KV double free|KV page use-after-free)",
        flags=re.IGNORECASE,
        description="SGLang's pool invariant check: free + evictable + in-use tokens do not add up",
    ),
    # --- KV slots ran out in the scheduler's own accounting (kvcached's elastic pool) -----------
    sig(
        "logical_kv_failure",
        "need_size=",
        r"available_size\(\)=(?P<available>[\d.]+) < need_size=(?P<need>\d+)",
        description="kvcached: the elastic KV pool has fewer free pages than the batch needs",
    ),
    # --- GPU and driver errors that are not exhaustion -------------------------------------------
    sig(
        "driver_error",
        (
            "driver version is insufficient",
            "NVIDIA driver on your system is too old",
            "forward compatibility was attempted",
            "no CUDA-capable device is detected",
            "CUDA driver initialization failed",
        ),
        r"(?P<what>CUDA driver version is insufficient for CUDA runtime version"
        r"|The NVIDIA driver on your system is too old|forward compatibility was attempted"
        r"|no CUDA-capable device is detected|CUDA driver initialization failed)",
        description="the CUDA driver is too old for the wheel, or no GPU is visible",
    ),
    sig(
        "nccl_error",
        ("NCCL error", "ncclSystemError", "ncclInternalError", "ncclRemoteError"),
        r"(?:NCCL error[^:]*:\s*(?P<what>unhandled system error|internal error|invalid usage"
        r"|remote process exited or there was a network error|invalid argument)"
        r"|(?P<code>ncclSystemError|ncclInternalError|ncclRemoteError|ncclInvalidUsage))",
        description="NCCL failed (shared memory, network, a peer, the driver)",
    ),
    sig(
        "triton_resources",
        ("OutOfResources", "out of resource:"),
        r"out of resource: (?P<what>shared memory|registers|\w[\w ]*?), Required: (?P<need>\d+), "
        r"Hardware limit: (?P<limit>\d+)",
        description="a Triton kernel needs more on-chip memory (shared memory, registers) than the "
        "GPU has: a kernel configuration limit, not device memory",
    ),
    sig(
        "tpu_vmem",
        ("vmem", "VMEM"),
        r"(?i)(?:exceeded scoped vmem limit|ran out of memory in memory space vmem"
        r"|scoped vmem)",
        _vmem,
        description="a TPU kernel ran out of its on-chip vector memory (VMEM), not HBM",
    ),
    # --- host memory, not GPU memory --------------------------------------------------------------
    sig(
        "host_oom_kill",
        (
            "exit code 137",
            "exitcode: -9",
            "exitcode  : -9",
            "Signal 9 (SIGKILL)",
            "code 137",
            "Killed",
        ),
        r"(?i)exit(?:ed)?(?: with)? (?:code|status)\s*:?\s*(?:137|-9)\b"
        r"|exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)|(?:^|\s)Killed(?:\s+(?:python|sglang|vllm)\S*|$)",
        description="a process was killed with SIGKILL (exit 137 / −9), usually by the host's "
        "OOM killer",
    ),
    # --- wrappers that only point at a failure elsewhere --------------------------------------------
    sig(
        "consequence",
        (
            "See root cause above",
            "check the stack trace above",
            "Engine core initialization failed",
            "EngineDeadError",
            "EngineCore encountered a fatal error",
            "EngineCore failed to start",
            "Please see the error messages above",
            "The actor died unexpectedly",
            "RayActorError",
            "ChildFailedError",
            "Child process unexpectedly failed",
            "method failed",
            "for the root cause",
            "failed to start",
            "Connection aborted",
            "RemoteDisconnected",
            "Server disconnected",
            "unhandled cuda error",
            "ncclUnhandledCudaError",
        ),
        r"(?P<what>See root cause above|(?:check|See) the stack trace (?:above )?for the root cause"
        r"|Engine core initialization failed|EngineDeadError|EngineCore encountered a fatal error"
        r"|(?:EngineCore|Engine process) failed to start|Please see the error messages above"
        r"|The actor died unexpectedly|RayActorError|ChildFailedError"
        r"|Child process unexpectedly failed with an exit code (?P<code>-?\d+)"
        r"|(?:Invocation of|Call to) \w+ method failed"
        r"|Connection aborted|RemoteDisconnected|Server disconnected"
        # a CUDA failure inside NCCL (often an OOM or a fault of its own): the cause is elsewhere
        r"|NCCL error[^:]*:\s*unhandled cuda error|ncclUnhandledCudaError)",
        description="a wrapper that says a failure happened elsewhere (its cause is above it)",
    ),
)
