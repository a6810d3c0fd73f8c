"""vLLM's memory lines, V0 and V1 (../shared/reference/vllm-logs.md; texts checked against the
vLLM 0.6.4, 0.7.3 and 0.10.1.1 sources).

Failures reuse the engine-neutral kinds where the meaning is the same (`startup_kv_error`: no KV
cache fits; `retraction`: KV space ran out and requests were preempted, which is graceful); the
budget and the advice read the engine from the incident and use vLLM's definitions and flags.
"""

from __future__ import annotations

import re

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.extract.signatures.base import Signature, convert, groups, sig
from oomdoctor.model import Scalar
from oomdoctor.units import integer, number


def _commas(m: re.Match[str]) -> dict[str, Scalar]:
    """Numbers printed with thousands separators (`422,288 tokens`)."""
    return {k: convert(v.replace(",", "")) if v else None for k, v in m.groupdict().items()}


def _preemption(m: re.Match[str]) -> dict[str, Scalar]:
    total = m.group("total")
    return {"n": 1, "mode": m.group("mode"), "total": integer(total)}


_PAIR = LazyPattern(r"(\w+)=([\d.]+)Gi[Bb]")  # 0.6.4 prints one of them as `Gib`


def _profile_results(m: re.Match[str]) -> dict[str, Scalar]:
    """0.6.4: `Memory profiling results: total_gpu_memory=23.58GiB ... gpu_memory_utilization=0.90`."""
    data: dict[str, Scalar] = {k: number(v, gib=True) for k, v in _PAIR.findall(m.group("rest"))}
    data["u"] = number(m.group("u"))
    return data


#: Above this a profiling-guard figure is bytes (0.5 – 0.9 print raw ints), not GiB.
_BYTES_ABOVE = 2.0**20


def _guard_gib(text: str | None) -> float | None:
    value = number(text) if text is not None else None
    if value is None:
        return None
    return value / 2**30 if value > _BYTES_ABOVE else float(value)


def _profiling_guard(m: re.Match[str]) -> dict[str, Scalar]:
    """vLLM's check that its own use grew during the profile run, in any release's words:
    figures in GiB (`initial`, `current`), what they measure (free or used memory), and whose
    change the message blames (`wording`: other processes, or memory not cleaned up)."""
    wording = m.group("wording")
    return {
        "initial": _guard_gib(m.group("initial")),
        "current": _guard_gib(m.group("current")),
        "measure": m.group("measure"),
        "wording": None
        if wording is None
        else ("other_processes" if wording.startswith("other") else "cleanup"),
    }


SIGNATURES: tuple[Signature, ...] = (
    # --- configuration -----------------------------------------------------------------------
    sig(
        "vllm_config",
        ("args: Namespace(", "non-default args: {", "LLM engine (v", "LLM engine with config"),
        r"^(?:args: Namespace\((?P<ns>.*)\)"
        r"|non-default args: \{(?P<dict>.*)\}"
        r"|Initializing (?:an|a V1) LLM engine(?: \(v(?P<version>[^)]+)\))? with config: "
        r"(?P<config>.*))$",
    ),
    sig(
        "vllm_config",
        "Chunked prefill is enabled with max_num_batched_tokens=",
        r"Chunked prefill is enabled with max_num_batched_tokens=(?P<batched>\d+)",
    ),
    # --- startup memory -------------------------------------------------------------------------
    sig(
        "vllm_weights",
        ("Loading model weights took", "Model loading took"),
        r"(?:Loading model weights took|Model loading took) (?P<w>[\d.]+) Gi?B",
    ),
    sig(
        "vllm_profile",
        "the current vLLM instance can use",
        r"the current vLLM instance can use total_gpu_memory \((?P<total>[\d.]+)GiB\) x "
        r"gpu_memory_utilization \((?P<u>[\d.]+)\) = (?P<budget>[\d.]+)GiB",
    ),
    sig(
        "vllm_profile",
        "model weights take",
        r"model weights take (?P<w>-?[\d.]+)GiB; non_torch_memory takes (?P<n>-?[\d.]+)GiB; "
        r"PyTorch activation peak memory takes (?P<a>-?[\d.]+)GiB; the rest of the memory "
        r"reserved for KV Cache is (?P<kv>-?[\d.]+)GiB",
    ),
    sig(
        "vllm_profile",
        "Memory profiling results:",
        r"Memory profiling results: (?P<rest>.*?gpu_memory_utilization=(?P<u>[\d.]+).*)",
        _profile_results,
    ),
    sig(
        "vllm_profile",
        "Total non KV cache memory",
        r"Total non KV cache memory: (?P<non_kv>[\d.]+)GiB; torch peak memory increase: "
        r"(?P<a>-?[\d.]+)GiB; non-torch forward increase memory: (?P<n>-?[\d.]+)GiB; "
        r"weights memory: (?P<w>[\d.]+)GiB",
    ),
    sig(
        "vllm_profile",
        "Requested memory:",
        r"Initial free memory: (?P<free>[\d.]+) GiB; Requested memory: (?P<u>[\d.]+) \(util\), "
        r"(?P<budget>[\d.]+) GiB",
    ),
    sig(
        "vllm_kv",
        "Available KV cache memory",
        r"Available KV cache memory: (?P<kv>-?[\d.]+) GiB",
    ),
    sig(
        "vllm_kv",
        "GPU KV cache size:",
        r"GPU KV cache size: (?P<tokens>[\d,]+) tokens",
        _commas,
    ),
    sig(
        "vllm_kv",
        "Maximum concurrency for",
        r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x",
        _commas,
    ),
    sig(
        "vllm_kv",
        " blocks: ",
        r"# (?P<device>GPU|CUDA|cuda|gpu|\w+) blocks: (?P<blocks>\d+), # CPU blocks: (?P<cpu>\d+)",
    ),
    sig(
        "vllm_graph",
        "Graph capturing finished",
        r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<g>-?[\d.]+) GiB",
    ),
    # The multimodal profile run and its budget, in every wording read from the sdists (0.6.3,
    # 0.6.6, 0.7.3, 0.8.4, 0.8.5, 0.9.2, 0.10.1, 0.11.0, 0.14.0, 0.20.0, 0.27.0, 0.33.0):
    # - V0 encoder-decoder runner (enc_dec_model_runner.py, 0.6.x - 0.10.x):
    #   `Starting profile run for multi-modal models.`
    # - V0 model_runner.py profile_run when max_mm_tokens > 0 (0.6.x - 0.10.x): `Computed
    #   max_num_seqs (min({seqs}, {batched} // {mm_tokens})) to be less than 1. Setting it to the
    #   minimum value of 1.`
    # - V0 dummy data longer than the profiled sequence (the images are then left out of the
    #   profile): 0.6.6 - 0.7.x `The context length ({n}) of the model is too short to hold the
    #   multi-modal embeddings in the worst case ({t} tokens in total, out of which {d} are reserved
    #   for multi-modal embeddings). ...`; 0.8.x - 0.11.x `The sequence length used for profiling
    #   (max_num_batched_tokens / max_num_seqs = {n}) is too short to hold ...` and `The encoder
    #   sequence length used for profiling (... = {n})  is too short ...` (two spaces in 0.8.x).
    # - V1 gpu_model_runner.py / tpu_model_runner.py (0.7.3 - 0.33.0, info_once from 0.20) and
    #   gpu/mm/encoder_runner.py (0.27+): `Encoder cache will be initialized with a budget of {b}
    #   tokens, and profiled with {n} {modality} items of the maximum feature size.`
    # Not members: `Skipping memory profiling for multimodal encoder and encoder cache.`,
    # `Skipping encoder profiling for embedding-only mode ...`, `... Encoder cache will not be
    # initialized.` (no multimodal profile runs).
    sig(
        "vllm_mm_profile",
        (
            "profile run for multi-modal models",
            "Encoder cache will be initialized",
            "to hold the multi-modal embeddings",
            "Computed max_num_seqs (",
        ),
        r"Starting profile run for multi-modal models"
        r"|Encoder cache will be initialized with a budget of (?P<budget>\d+) tokens, and "
        r"profiled with (?P<items>\d+) (?P<modality>\w+) items"
        r"|(?:context length \((?P<seq_len>\d+)\) of the model |max_num_seqs = "
        r"(?P<profile_len>\d+)\)\s+)?is too short to hold the multi-modal embeddings in the worst "
        r"case \((?P<mm_tokens>\d+) tokens in total"
        r"|Computed max_num_seqs \((?P<seqs_expr>min\([^)]*\))\) to be less than 1",
    ),
    sig(
        "vllm_ready",
        ("Starting vLLM API server", "init engine (profile, create kv cache"),
        r"Starting vLLM API server|init engine \(profile, create kv cache",
    ),
    sig(  # the periodic stats line (V0 `Avg prompt throughput: ... Running: N reqs, Swapped:`,
        # V1 `Engine 000: Avg prompt throughput: ... Running: N reqs, Waiting: M reqs`): serving
        "vllm_stats",
        "Avg prompt throughput:",
        r"Avg prompt throughput: [\d.]+ tokens/s, .*?Running: (?P<running>\d+) reqs"
        r"(?:.*?GPU KV cache usage: (?P<kv_usage>[\d.]+)%)?",
    ),
    # --- failures --------------------------------------------------------------------------------
    sig(
        "startup_kv_error",
        "No available memory for the cache blocks",
        r"(?P<variant>No available memory for the cache blocks)",
    ),
    sig(  # V1 profiled no room (the error follows, or the excerpt ends first)
        "startup_kv_error",
        "Available KV cache memory",
        r"Available KV cache memory: (?P<available>-[\d.]+|0(?:\.0+)?) GiB",
        lambda m: {
            "available": number(m.group("available"), gib=True),
            "variant": "no KV memory profiled",
            "precursor": True,
        },
    ),
    sig(  # V0: the profile left no block
        "startup_kv_error",
        " blocks: 0,",
        r"# (?:GPU|CUDA|cuda|gpu|\w+) blocks: 0, # CPU blocks: \d+",
        lambda m: {"variant": "no GPU blocks", "precursor": True},
    ),
    sig(
        "startup_kv_error",
        "is larger than the maximum number of tokens that can be stored in KV cache",
        r"The model's max seq len \((?P<max_len>\d+)\) is larger than the maximum number of "
        r"tokens that can be stored in KV cache \((?P<kv_tokens>\d+)\)",
    ),
    sig(
        "startup_kv_error",
        "KV cache is needed, which is larger than the available KV cache memory",
        r"To serve at least one request with the models?'s max seq len \((?P<max_len>\d+)\), "
        r"\((?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
        r"cache memory \((?P<available>-?[\d.]+) GiB\)\.(?: Based on the available memory, "
        r"the estimated maximum model length is (?P<estimated>\d+)\.)?",
    ),
    sig(
        "startup_free_memory",
        "on startup is less than desired GPU memory utilization",
        r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup "
        r"is less than desired GPU memory utilization \((?P<u>[\d.]+), (?P<requested>[\d.]+) GiB\)",
    ),
    sig(  # every wording, 0.4.2 – 0.33 (docs/reference-ray-oom.md lists them by release)
        "profiling_free_changed",
        "Error in memory profiling",
        r"Error in memory profiling\.(?: Initial (?P<measure>free|used) memory "
        r"(?P<initial>[\d.]+)(?:[ ]GiB)?, current(?:ly used| free) memory (?P<current>[\d.]+)"
        r"(?:[ ]GiB)?\.?)?(?: This happens when (?P<wording>the \w+ memory was not properly "
        r"cleaned up|other processes sharing the same container release))?",
        _profiling_guard,
    ),
    sig(
        "retraction",
        "because there is not enough KV cache space",
        r"is preempted by PreemptionMode\.(?P<mode>\w+) mode because there is not enough KV cache "
        r"space(?:.*total_num_cumulative_preemption=(?P<total>\d+))?",
        _preemption,
    ),
    # --- RL colocation: sleep mode frees the engine's memory for a trainer ------------------------
    sig(
        "rl_colocation",
        ("Sleep mode freed", "seconds to fall asleep", "seconds to wake up", "wake up the engine"),
        r"Sleep mode freed (?P<freed>[\d.]+) GiB memory, (?P<in_use>[\d.]+) GiB memory is still "
        r"in use|It took (?P<s>[\d.]+) seconds to (?P<what>fall asleep|wake up)|wake up the engine",
        groups,
    ),
)
