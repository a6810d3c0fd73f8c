"""Flags that only one engine has: advice for one engine's log never names the other's.

SGLang and vLLM spell the same ideas differently (SGLang's --mem-fraction-static sizes weights +
KV, vLLM's --gpu-memory-utilization the whole budget; --max-running-requests vs --max-num-seqs;
--context-length vs --max-model-len). Flags both have (--kv-cache-dtype, --quantization) are in
neither list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

SGLANG_ONLY: tuple[str, ...] = (
    "--mem-fraction-static",
    "--chunked-prefill-size",
    "--max-running-requests",
    "--max-prefill-tokens",
    "--max-total-tokens",
    "--cuda-graph-max-bs",
    "--cuda-graph-max-bs-decode",
    "--cuda-graph-max-bs-prefill",
    "--cuda-graph-backend-decode",
    "--cuda-graph-backend-prefill",
    "--disable-cuda-graph",
    "--disable-piecewise-cuda-graph",
    "--schedule-conservativeness",
    "--context-length",
    "--tp-size",
    "--enable-memory-saver",
    "--enable-dp-attention",
    "--enable-hierarchical-cache",
)
VLLM_ONLY: tuple[str, ...] = (
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--tensor-parallel-size",
    "--limit-mm-per-prompt",
    "--enforce-eager",
    "--enable-sleep-mode",
    "--swap-space",
    "--max-seq-len-to-capture",
    "--mm-processor-kwargs",
)
FOREIGN: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"sglang": VLLM_ONLY, "vllm": SGLANG_ONLY}
)


def _pattern(flags: Iterable[str]) -> re.Pattern[str]:
    words = sorted(flags, key=len, reverse=True)
    return re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(f) for f in words) + r")(?![\w-])")


_FOREIGN_RE = MappingProxyType({family: _pattern(flags) for family, flags in FOREIGN.items()})


def foreign_flags(family: str, text: str) -> list[str]:
    """The other engine's flags named in ``text`` (an action's flag or text)."""
    pattern = _FOREIGN_RE.get(family)
    return pattern.findall(text) if pattern else []
