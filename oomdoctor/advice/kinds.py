"""The advice kinds a rule can name (its `advice` key): defined here once.

The rule loader validates against these names, advice/registry.py maps each one to its
generators per engine, `oomdoctor rules advice` prints this table, and a test checks that the
README lists exactly these kinds.
"""

from __future__ import annotations

from collections.abc import Mapping

ADVICE_KINDS: Mapping[str, str] = {
    "raise_mem_fraction": "raise the engine's fraction (SGLang's y, vLLM's u) to the value that "
    "gives a KV pool, inside the workable window",
    "weights_do_not_fit": "the weights alone do not fit the memory: more GPUs, quantisation, "
    "a smaller model",
    "lower_mem_fraction": "lower the fraction by the measured shortfall, and the batch levers "
    "(chunked prefill, running requests, graph batch size)",
    "graph_capture": "make room for CUDA-graph capture (graph batch size, fraction) or skip it",
    "free_gpu": "free or size around the other processes that hold the GPU",
    "reserve_encoder": "leave room for a multimodal encoder: reserve, lower fraction, "
    "smaller inputs",
    "kv_slots": "the KV pool ran out of slots, not of memory: pool size and request limits",
    "retraction": "requests are retracted (or preempted) for KV space: grow the pool or admit less",
    "host_memory": "host (CPU) memory ran out, not GPU memory",
    "gpu_fault": "a GPU fault that is not exhaustion (illegal access, no kernel image, driver)",
    "thinker_kv": "SGLang Omni's thinker stage got no KV pool: its own fraction or budget",
    "omni_placement": "SGLang Omni's stages do not fit their GPU: move or shrink a stage",
    "remedy": "the winning rule's own remedy text, as written in its [docs]",
    "oversized": "one allocation larger than the card: no fraction fits it; shrink the request",
    "none": "no action (the rule only explains)",
}
