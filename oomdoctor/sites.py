"""Where in SGLang an allocation failed, read from the traceback frames.

The most specific site wins: a ViT forward runs inside the model forward, and a graph capture
runs a forward too, so encoder and capture frames outrank the generic forward ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomdoctor.model import Frame

# (site, substrings of "path:function" that mark it), in precedence order.
_SITES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "weights",
        (
            "model_loader/",
            ":load_model",
            ":load_weights",
            ":weight_loader",
            "weight_utils.py:",
            ":load_weights_and_postprocess",
        ),
    ),
    (
        "kv_pool",
        (
            "memory_pool.py:",
            ":_create_buffers",
            ":init_memory_pool",
            "kv_cache_configurator.py:",
            "pool_configurator.py:",
            ":init_kv_cache",
        ),
    ),
    (
        "graph_capture",  # capturing only: replaying a captured graph is an ordinary forward
        (
            ":capture",
            ":init_cuda_graphs",
            ":init_device_graphs",
            ":init_piecewise_cuda_graphs",
            "graph_runner.py:__init__",
        ),
    ),
    (
        "encoder",
        (
            "mm_utils.py:",
            ":general_mm_embed_routine",
            ":embed_mm_inputs",
            ":get_image_feature",
            ":get_video_feature",
            ":get_audio_feature",
            "vision_tower",
            "audio_tower",
            "image_encoder",
            "audio_encoder",
            ":encode_images",
            "/vision",
            "code2wav",
            "vocoder",
            "_asr",
            "/asr",
            ":batch_image_encoder_payloads",
            ":batch_audio_encoder_payloads",
            ":run_single_encoder_payload",
        ),
    ),
    ("logits", ("logits_processor.py:", ":_get_logits", ":compute_logprobs")),
    ("sampling", ("sampler.py:",)),
    (
        "comm",
        (
            "pynccl",
            ":all_reduce",
            "custom_all_reduce",
            ":init_distributed_environment",
            "symm_mem",
            "deepep",
        ),
    ),
    (
        "forward",
        (
            ":forward_extend",
            ":forward_decode",
            ":run_batch",
            ":forward_batch_generation",
            ":forward_thread_func",
            "model_runner.py:forward",
            ":forward_idle",
            "/layers/",
            "/models/",
        ),
    ),
)


def classify(frames: Sequence[Frame]) -> tuple[str, Frame | None]:
    """The site of the most specific work named in a traceback (or ``unknown``), and its frame."""
    probes = [f"{f.path}:{f.func}" for f in frames]
    for site, marks in _SITES:
        for frame, probe in zip(frames, probes, strict=False):
            if any(mark in probe for mark in marks):
                return site, frame
    return "unknown", None
