"""Context lines: periodic stats, RL colocation markers and SGLang Omni stage lines."""

from __future__ import annotations

import re

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.extract.signatures.base import Signature, convert, sig
from oomdoctor.model import Scalar

_PAIR = re.compile(r"(#?[\w .()/-]+?): ([^,]+)")


def _stats(m: re.Match[str]) -> dict[str, Scalar]:
    """``Decode batch, #running-req: 3, #token: 100, token usage: 0.50, ...`` → a flat dict."""
    data: dict[str, Scalar] = {"phase": m.group("phase").lower()}
    for key, value in _PAIR.findall(m.group("rest")):
        key = key.strip().lstrip("#").replace(" ", "_").replace("-", "_")
        data[key] = convert(value.strip())
    return data


_KV = LazyPattern(r"(\w+)=(\S+)")


def _key_values(m: re.Match[str]) -> dict[str, Scalar]:
    data: dict[str, Scalar] = {"event": m.group("event")}
    for key, value in _KV.findall(m.group("rest")):
        data[key] = convert(value.removesuffix("GiB"), gib=value.endswith("GiB"))
    return data


SIGNATURES: tuple[Signature, ...] = (
    sig(
        "stats",
        ("Prefill batch", "Decode batch"),
        r"^(?P<phase>Prefill|Decode) batch(?: \[\d+\])?[.,] (?P<rest>.*?)(?:, )?$",
        _stats,
    ),
    sig(
        "rl_colocation",
        (
            "torch_memory_saver",
            "enable_memory_saver=True",
            "'enable_memory_saver': True",
            "verl_engine",
            "verl.workers",
        ),
        r"torch_memory_saver|enable_memory_saver(?:=|': )True|verl_engine|verl\.workers",
    ),
    # SGLang Omni (reference §6.2)
    sig(
        "omni_stage",
        ("sglang_ar_startup", "sglang_ar_started"),
        r"(?P<event>sglang_ar_start(?:up|ed)) (?P<rest>.*)",
        _key_values,
    ),
    sig(
        "omni_device",
        "Set current device to",
        r"Set current device to (?P<gpu>\d+) for stage (?P<stage>[\w-]+)",
    ),
    sig(
        "omni_stage_group",
        "StageGroup ",
        r"StageGroup (?P<stage>\S+): spawned \d+ process\(es\) \(pids=\[(?P<pids>[\d, ]*)\]\)",
    ),
    sig(
        "omni_memory_profile",
        "SGLang AR memory profile",
        r"SGLang AR memory profile: (?P<event>gpu_mem_accounting=\w+|hybrid_state=\S+)(?P<rest>.*)",
        _key_values,
    ),
    sig(
        "omni_compute_failed",
        ("compute_fn failed", "batch failed for requests"),
        r"(?P<who>SimpleScheduler: compute_fn failed for (?P<request>\S+)"
        r"|OmniScheduler batch failed for requests)",
    ),
    sig(
        "omni_encode_failed",
        ("audio encode failed", "encode retry failed", "cleanup failed after OOM"),
        # (?<![\w-]): a name starts where a word does, or a long run costs one try per letter
        r"(?<![\w-])(?P<model>[\w-]+) (?:batched |per-item )?audio encode(?: retry)? failed"
        r"|(?<![\w-])(?P<model2>[\w-]+) (?:encoder stream|device cache|CUDA cache) cleanup "
        r"failed after OOM",
    ),
    sig(
        "omni_stage_dead",
        ("Dead stage process", "died during startup", "Stage process"),
        r"Dead stage process\(es\) detected: (?P<stages>.*)"
        r"|Process (?P<stage>\S+) died during startup \(exit code (?P<code>-?\d+)\)"
        r"|Stage process (?P<stage2>\S+) failed",
    ),
    sig(
        "encoder_headroom",
        ("headroom", "memory_budget_exceeded"),
        r"free VRAM (?P<free>[\d.]+)\s?Gi?B (?:<|is below) (?P<need>[\d.]+)\s?Gi?B headroom"
        r"|memory_budget_exceeded",
    ),
    sig(
        "omni_kv_reject",
        "than the thinker KV cache can hold",
        r"Request requires more tokens than the thinker KV cache can hold \(input_tokens=(?P<input>\d+)"
        r", max_new_tokens=(?P<new>\d+), required_tokens=(?P<required>\d+), kv_capacity=(?P<cap>\d+)\)",
    ),
)
