"""RL colocation: torch_memory_saver (SGLang --enable-memory-saver, slime, verl) and vLLM's
sleep-mode allocator. Their C++ lines carry no logger envelope and end the process with exit(1).

Formats: ../shared/reference/rl-colocation.md §1 (TMS templates T1-T15, CUDA codes) and §5.
Pasted logs collapse double spaces and retype case, so spaces match `\\s+` and words match
case-insensitively where users retype them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from oomdoctor.extract.signatures.base import Signature, groups, sig
from oomdoctor.model import Scalar
from oomdoctor.units import integer

#: CUDA error codes (CUresult / cudaError_t, CUDA 12.8) and what each means here (§1.3).
CUDA_CODES: Mapping[int, tuple[str, str]] = MappingProxyType(
    {
        1: (
            "invalid argument",
            "a parameter out of range (size, granularity, address): not memory",
        ),
        2: ("out of memory", "GPU memory ran out"),
        3: ("initialization error", "the CUDA driver was not initialised: not memory"),
        4: ("driver shutting down", "the process was exiting after another failure"),
        100: ("no CUDA-capable device", "GPU visibility or placement: not memory"),
        101: ("invalid device ordinal", "GPU visibility or placement: not memory"),
        201: ("invalid context", "no or wrong current CUDA context (a thread without one)"),
        208: ("already mapped", "virtual-memory mapping state is wrong (a double map)"),
        211: ("not mapped", "virtual-memory mapping state is wrong (a double unmap)"),
        214: ("ECC uncorrectable", "a hardware memory error"),
        400: ("invalid resource handle", "a stale handle"),
        700: ("illegal address", "a kernel touched a bad address (memory used while paused?)"),
        719: ("launch failure", "a kernel crashed"),
        800: (
            "operation not permitted",
            "virtual-memory management is not allowed here (MIG, vGPU, WSL)",
        ),
        801: ("operation not supported", "virtual-memory management is not supported here"),
        999: ("unknown error", "a driver fault"),
    }
)
OOM_CODE = 2

_TMS_ERROR = (
    r"\[torch_memory_saver\.cpp\]\s+(?P<api>CUresult|cudaError|hipError_t)\s+error"
    r"(?::\s*(?P<code>\d+)(?:\s*\((?P<text>[^)]*)\))?|\s+result=(?P<code2>\d+))"
    r"(?:\s+file=(?P<file>\S+))?(?:\s+func=(?P<func>\w+))?(?:\s+line=(?P<line>\d+))?"
)


def _tms(m: re.Match[str], oom: bool) -> dict[str, Scalar] | None:
    code = integer(m.group("code") or m.group("code2"))
    if code is None or (code == OOM_CODE) != oom:
        return None
    data = groups(m)
    data["code"] = code
    data.pop("code2", None)
    name, meaning = CUDA_CODES.get(code, ("unknown code", "not a known memory code"))
    data["meaning"] = meaning
    data["text"] = data.get("text") or name
    return data


def _tms_oom(m: re.Match[str]) -> dict[str, Scalar] | None:
    return _tms(m, oom=True)


def _tms_other(m: re.Match[str]) -> dict[str, Scalar] | None:
    return _tms(m, oom=False)


def _cumem(m: re.Match[str], oom: bool) -> dict[str, Scalar] | None:
    is_oom = "out of memory" in m.group("text").lower()
    if is_oom != oom:
        return None
    data = groups(m)
    data["raised"] = bool(m.group("raised"))
    return data


_CUMEM = (
    r"(?i)(?P<raised>(?:Runtime\s?Error|Exception|Call to \w+ method failed|Wake-up failed on Rank "
    r"\d+):\s*)?cuda error: (?P<text>[^\n]*?) at \S*cumem_allocator\.cpp:\s*(?P<line>\d+)"
)

SIGNATURES: tuple[Signature, ...] = (
    sig(
        "tms_oom",
        ("[torch_memory_saver.cpp]", "torch_memory_saver_hip.cpp"),
        _TMS_ERROR,
        _tms_oom,
        description="torch_memory_saver: a CUDA call failed with code 2 (out of memory), then exit(1)",
    ),
    sig(
        "tms_error",
        "[torch_memory_saver.cpp]",
        _TMS_ERROR,
        _tms_other,
        description="torch_memory_saver: a CUDA call failed with a code other than out of memory",
    ),
    sig(
        "tms_error",
        "[torch_memory_saver.cpp]",
        r"\[torch_memory_saver\.cpp\] (?P<what>Cannot (?:pause|resume) allocation that is not "
        r"(?:active|paused)|Unsupported environment varialbe value|dlsym failed|FATAL: NULL tag"
        r"|get_cpu_backup_pointer fail|Trying to free a pointer not allocated here"
        r"|cpu_backup should not be nullptr|tag should not be null|only support interesting region"
        r"|cpu_backup missing on resume|disk backup missing on resume)",
        description="torch_memory_saver: a state or configuration check failed (not memory)",
    ),
    sig(
        "tms_retry",
        ("cuMemCreate CUDA_ERROR_OUT_OF_MEMORY", "hipMemCreate hipErrorOutOfMemory"),
        r"(?:cuMemCreate CUDA_ERROR_OUT_OF_MEMORY|hipMemCreate hipErrorOutOfMemory) "
        r"\(may not be an issue",
        description="torch_memory_saver 0.0.10: cuMemCreate failed, PyTorch frees its cache and retries",
    ),
    sig(
        "tms_retry",
        "TorchMemorySaver::malloc return OOM since memory_margin_bytes",
        r"memory_margin_bytes=(?P<margin>\d+) allocation_size=(?P<size>\d+) free_bytes=(?P<free>\d+)",
        description="torch_memory_saver refused an allocation that would break its margin",
    ),
    sig(
        "tms_error",
        ("TorchMemorySaver is disabled", "TorchMemorySaver observes invalid LD_PRELOAD"),
        r"(?P<what>TorchMemorySaver is disabled for the current process because [^.(]*"
        r"|TorchMemorySaver observes invalid LD_PRELOAD)",
        description="torch_memory_saver is not active: released memory is not really released",
    ),
    sig(
        "cumem_oom",
        ("cumem_allocator.cpp", "cumem_allocator"),
        _CUMEM,
        lambda m: _cumem(m, oom=True),
        description="vLLM sleep mode: the cumem allocator could not map memory (wake-up or a "
        "sleep-mode allocation)",
    ),
    sig(
        "cumem_error",
        ("cumem_allocator.cpp", "cumem_allocator"),
        _CUMEM,
        lambda m: _cumem(m, oom=False),
        description="vLLM sleep mode: a virtual-memory call failed for a reason other than memory",
    ),
    sig(
        "sleep_not_released",
        "Memory usage increased after sleeping",
        r"Memory usage increased after sleeping",
        description="vLLM: memory was allocated by something else while the engine slept",
    ),
)
