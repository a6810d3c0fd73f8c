"""SGLang's lower --mem-fraction-static for multimodal models, as `plan` applies it.

SGLang 0.5.6, ``python/sglang/srt/server_args.py``: ``ServerArgs._handle_gpu_memory_settings``
computes the default fraction ``round((gpu_mem − reserved) / gpu_mem, 3)`` and then, when the
model is multimodal (``model_config.is_multimodal``: an architecture in
``configs/model_config.py``'s ``multimodal_model_archs``), calls
``ServerArgs.adjust_mem_fraction_for_vlm``. That returns at once without a ``vision_config``;
otherwise it multiplies the fraction by ``0.95 × clamp(1 − 0.1 × (L·H² / (24·1024²) − 1), 0.8,
1.05)``, L and H being the ViT's ``num_hidden_layers`` (default 24) and ``hidden_size`` (default
1024), a ViT-L/14 scoring 1. It runs only inside ``if self.mem_fraction_static is None``: a value
the user passes is kept. ``ModelRunner`` (0.5.6) only turns chunked prefill off for models that
do not support it. Older releases multiply any value (sglang-logs.md §2.1): 0.4.6 by 0.90,
0.3.6 by 0.95. 0.5.23 keeps the same function (sglang-logs.md §4).
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.budget.model_config import ModelShape

#: ``multimodal_model_archs`` of SGLang 0.5.6 (python/sglang/srt/configs/model_config.py).
MULTIMODAL_ARCHS = frozenset(
    {
        "CLIPModel",
        "DeepseekVL2ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForConditionalGeneration",
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "Grok1VForCausalLM",
        "Grok1AForCausalLM",
        "LlavaLlamaForCausalLM",
        "Llama4ForConditionalGeneration",
        "LlavaMistralForCausalLM",
        "LlavaQwenForCausalLM",
        "LlavaForConditionalGeneration",
        "LlavaVidForCausalLM",
        "MiniCPMO",
        "MiniCPMV",
        "Mistral3ForConditionalGeneration",
        "MultiModalityCausalLM",
        "MllamaForConditionalGeneration",
        "NemotronH_Nano_VL_V2",
        "Qwen2AudioForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "InternVLChatModel",
        "InternS1ForConditionalGeneration",
        "Phi4MMForCausalLM",
        "Step3VLForConditionalGeneration",
        "POINTSV15ChatModel",
        "DotsVLMForCausalLM",
        "DotsOCRForCausalLM",
        "Sarashina2VisionForCausalLM",
        "NVILAForConditionalGeneration",
        "NVILALiteForConditionalGeneration",
        "DeepseekOCRForCausalLM",
        "JetVLMForConditionalGeneration",
    }
)
#: ViT-L/14, the encoder SGLang's factor is scaled against: 24 layers × 1024 wide.
BASELINE_VIT = 24 * 1024**2


class Adjustment(NamedTuple):
    factor: float  # SGLang multiplies the fraction by this
    given_too: bool  # it also lowers a value the user passes (0.3.6, 0.4.6)
    basis: str


def is_multimodal(model: ModelShape | None) -> bool:
    return model is not None and any(a in MULTIMODAL_ARCHS for a in model.architectures)


def vit_factor(layers: int, hidden: int) -> float:
    """0.95 × clamp(1 − 0.1 × (L·H²/(24·1024²) − 1), 0.8, 1.05), as adjust_mem_fraction_for_vlm."""
    ratio = layers * hidden**2 / BASELINE_VIT
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def adjustment(model: ModelShape | None, era: str) -> Adjustment | None:
    """What SGLang of this era does to the fraction of this model (None: nothing)."""
    if model is None or not is_multimodal(model):
        return None
    if era == "0.3.6":
        return Adjustment(0.95, True, "SGLang 0.3.6 ModelRunner: multimodal × 0.95")
    if era == "0.4.6":
        return Adjustment(0.90, True, "SGLang 0.4.6 ModelRunner: multimodal × 0.90")
    if model.vision is None:
        return None  # adjust_mem_fraction_for_vlm returns without a vision_config
    layers, hidden = model.vision
    factor = vit_factor(layers, hidden)
    return Adjustment(
        factor,
        False,
        f"SGLang ServerArgs.adjust_mem_fraction_for_vlm (0.5.6): 0.95 × clamp(1 − 0.1 × "
        f"({layers}·{hidden}² / (24·1024²) − 1), 0.8, 1.05) = {factor:.4f}",
    )


def encoder_note(model: ModelShape, adj: Adjustment | None, given: bool, dynamic: float) -> str:
    """What the vision encoder needs at run time, and what SGLang does (or not) about it."""
    arch = next(a for a in model.architectures if a in MULTIMODAL_ARCHS)
    vit = f" ({model.vision[0]} layers × {model.vision[1]} wide)" if model.vision else ""
    head = (
        f"{arch} is multimodal: its encoder{vit} runs per request inside the dynamic share "
        f"(1 − y)·pre = {dynamic:.2f} GiB, beside activations and CUDA graphs; its peak grows "
        "with image size and images per request, so cap those if it runs out"
    )
    if adj is None:
        return head + "; SGLang does not lower the fraction for it here (no vision_config)"
    if given and not adj.given_too:
        return (
            head + f"; SGLang lowers only its own default (× {adj.factor:.3f}, {adj.basis}), not "
            "a value passed with --mem-fraction-static: leave the encoder that room yourself"
        )
    return head + f"; SGLang lowers the fraction for it: {adj.basis}"
