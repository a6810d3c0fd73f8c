"""A model's memory shape from its Hugging Face ``config.json``: KV bytes per token as SGLang
computes them (sglang-logs.md §3.3) and the size of the weights.

Read locally; nothing is downloaded. Weights come from ``model.safetensors.index.json``
(``metadata.total_size``) when it is there, else from a parameter count of the architecture.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from oomdoctor.read import bounded
from oomdoctor.units import in_range

DTYPE_BYTES = MappingProxyType(
    {
        "float32": 4.0,
        "float": 4.0,
        "bfloat16": 2.0,
        "float16": 2.0,
        "half": 2.0,
        "fp8_e4m3": 1.0,
        "fp8_e5m2": 1.0,
        "fp8": 1.0,
        "float8_e4m3fn": 1.0,
        "fp4_e2m1": 0.5,
    }
)
#: SGLang models whose sliding-window layers get the smaller hybrid SWA pool (0.5.10+).
SWA_POOL_MODELS = frozenset({"gemma3", "gemma3_text", "llama4", "gpt_oss", "mimo_v2_flash"})
MLA_MODELS = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"})


class ConfigError(ValueError):
    """A config that cannot be read as a model description."""


class ModelShape(NamedTuple):
    name: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    vocab: int
    dtype_bytes: float
    mla_dims: int | None  # kv_lora_rank + qk_rope_head_dim for MLA models
    full_attention_layers: int  # layers that hold a full KV cache (all, for plain models)
    swa_layers: int  # layers with a sliding-window pool (SWA_POOL_MODELS only)
    linear_layers: int  # linear-attention / mamba layers (state, not KV)
    params: int  # estimated parameter count
    weight_bytes: float  # from the safetensors index, else params × bytes per parameter
    weights_from: str  # "safetensors index" or "parameter count"
    quantization: str | None
    max_context: int | None
    architectures: tuple[str, ...] = ()
    #: the vision encoder as SGLang reads vision_config (num_hidden_layers, default 24;
    #: hidden_size, default 1024); None when the config has no vision_config
    vision: tuple[int, int] | None = None

    def bytes_per_token(self, tp: int = 1, kv_dtype: str = "auto", swa_ratio: float = 0.8) -> int:
        """KV cell size per token on one rank, as SGLang sizes its pool."""
        dtype = (
            self.dtype_bytes if kv_dtype in ("auto", "", None) else DTYPE_BYTES.get(kv_dtype, 2.0)
        )
        if self.mla_dims is not None:  # the latent cache is not split by TP
            return int(self.mla_dims * self.full_attention_layers * dtype)
        kv_heads = max(1, self.kv_heads // tp)
        full = kv_heads * (self.head_dim + self.v_head_dim) * self.full_attention_layers * dtype
        swa = kv_heads * (self.head_dim + self.v_head_dim) * self.swa_layers * dtype * swa_ratio
        return int(full + swa)

    def weights_gib_per_gpu(self, tp: int = 1, pp: int = 1) -> float:
        return self.weight_bytes / (tp * pp) / (1 << 30)


def _get(cfg: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if name in cfg and cfg[name] is not None:
            return cfg[name]
    return default


def _int(cfg: Mapping[str, Any], *names: str, default: int | None = None) -> int:
    """A positive whole number of the config (sizes and counts: none of them is 0 or an
    infinity), or ConfigError."""
    value = _get(cfg, *names, default=default)
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not in_range(value)
        or value < 1
    ):
        raise ConfigError(f"config has no usable {'/'.join(names)}")
    return int(value)


def _opt(cfg: Mapping[str, Any], name: str, default: int) -> int:
    """An optional count of the config (0 allowed); ``default`` where it is unusable."""
    value = cfg.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not in_range(value):
        return default
    return max(int(value), 0)


def load(path: Path) -> ModelShape:
    """A config.json, or a model directory holding one (and maybe a safetensors index)."""
    directory = path if path.is_dir() else path.parent
    config = path / "config.json" if path.is_dir() else path
    try:
        raw = bounded.read_json(config)
    except bounded.BoundedError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{config}: not a JSON object")
    index_total = _index_total(directory / "model.safetensors.index.json")
    try:
        return shape(
            raw,
            name=directory.name if path.is_dir() else config.parent.name,
            index_total=index_total,
        )
    except ConfigError as exc:
        raise ConfigError(f"{config}: {exc}") from None


def _index_total(index: Path) -> int | None:
    if not index.exists():
        return None
    try:
        data: Any = bounded.read_json(index)
    except bounded.BoundedError as exc:
        raise ConfigError(str(exc)) from None
    try:
        total = data["metadata"]["total_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(total) if isinstance(total, int | float) and total > 0 else None


def shape(
    raw: Mapping[str, Any], name: str = "model", index_total: int | None = None
) -> ModelShape:
    """The memory shape of a parsed config (the language model of a VLM)."""
    cfg: Mapping[str, Any] = raw
    text = raw.get("text_config") or raw.get("llm_config") or raw.get("language_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        cfg = {**raw, **text}
    model_type = str(_get(raw, "model_type", default="") or "")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, "hidden_size", "d_model", "n_embd")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _int(cfg, "head_dim", default=max(hidden // heads, 1))
    v_head_dim = (
        _int(cfg, "v_head_dim", default=head_dim) if model_type not in MLA_MODELS else head_dim
    )
    vocab = _int(cfg, "vocab_size", default=32000)
    dtype_name = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", "")
    dtype = DTYPE_BYTES.get(dtype_name, 2.0)
    quant = _get(raw, "quantization_config", default=None)
    quant_method = str(quant.get("quant_method")) if isinstance(quant, dict) else None

    mla = None
    if model_type in MLA_MODELS or "kv_lora_rank" in cfg:
        mla = _int(cfg, "kv_lora_rank") + _int(cfg, "qk_rope_head_dim")

    full, swa, linear = layers, 0, 0
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        linear = sum(1 for t in layer_types if "linear" in str(t) or "mamba" in str(t))
        sliding = sum(1 for t in layer_types if "sliding" in str(t))
        if model_type in SWA_POOL_MODELS:
            swa = sliding
        full = layers - linear - swa
    elif cfg.get("full_attention_interval"):  # Qwen3-Next: one full-attention layer in N
        interval = _int(cfg, "full_attention_interval")
        full = layers // interval
        linear = layers - full

    params = _param_count(cfg, model_type, layers, hidden, heads, kv_heads, head_dim, vocab)
    if index_total is not None:
        weight_bytes, source = float(index_total), "safetensors index"
    else:
        per_param = {"fp8": 1.0, "awq": 0.53, "gptq": 0.53, "compressed-tensors": 1.0}.get(
            quant_method or "", dtype
        )
        embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
        weight_bytes = (params - embed) * per_param + embed * dtype
        source = "parameter count"
    return ModelShape(
        name=name,
        model_type=model_type,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        vocab=vocab,
        dtype_bytes=dtype,
        mla_dims=mla,
        full_attention_layers=full,
        swa_layers=swa,
        linear_layers=linear,
        params=params,
        weight_bytes=weight_bytes,
        weights_from=source,
        quantization=quant_method,
        max_context=_get(cfg, "max_position_embeddings", default=None),
        architectures=_architectures(raw),
        vision=_vision(raw),
    )


def _architectures(raw: Mapping[str, Any]) -> tuple[str, ...]:
    archs = raw.get("architectures")
    return tuple(str(a) for a in archs) if isinstance(archs, list) else ()


def _vision(raw: Mapping[str, Any]) -> tuple[int, int] | None:
    """vision_config's layers and width with SGLang's defaults (ServerArgs.adjust_mem_fraction_
    for_vlm, 0.5.6, reads ``num_hidden_layers`` and ``hidden_size``: Qwen2.5-VL's ``depth`` is
    not read, so it counts as 24 layers)."""
    vision = raw.get("vision_config")
    if not isinstance(vision, dict):
        return None
    return _opt(vision, "num_hidden_layers", 24), _opt(vision, "hidden_size", 1024)


def _param_count(
    cfg: Mapping[str, Any],
    model_type: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
) -> int:
    """Parameters of a decoder-only transformer (dense, MoE, MLA); norms and biases ignored."""
    if "kv_lora_rank" in cfg:
        rope = _opt(cfg, "qk_rope_head_dim", 64)
        nope = _opt(cfg, "qk_nope_head_dim", 128)
        v_dim = _opt(cfg, "v_head_dim", 128)
        kv_rank = _opt(cfg, "kv_lora_rank", 0)
        q_rank = _opt(cfg, "q_lora_rank", 0)
        q = (
            hidden * q_rank + q_rank * heads * (nope + rope)
            if q_rank
            else hidden * heads * (nope + rope)
        )
        attn = (
            q
            + hidden * (kv_rank + rope)
            + kv_rank * heads * (nope + v_dim)
            + heads * v_dim * hidden
        )
    else:
        attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    dense_ffn = 3 * hidden * _opt(cfg, "intermediate_size", 4 * hidden)
    experts = (
        _opt(cfg, "n_routed_experts", 0)
        or _opt(cfg, "num_experts", 0)
        or _opt(cfg, "num_local_experts", 0)
    )
    mlp_total = 0
    if experts:
        moe_inter = _opt(cfg, "moe_intermediate_size", 0) or _opt(
            cfg, "intermediate_size", 4 * hidden
        )
        shared = _opt(cfg, "n_shared_experts", 0) * 3 * hidden * moe_inter
        shared += 3 * hidden * _opt(cfg, "shared_expert_intermediate_size", 0)
        moe = experts * 3 * hidden * moe_inter + shared + hidden * experts
        first_dense = min(_opt(cfg, "first_k_dense_replace", 0), layers)
        freq = _opt(cfg, "moe_layer_freq", 0) or _opt(cfg, "decoder_sparse_step", 0) or 1
        moe_layers = -(-(layers - first_dense) // freq)  # i in [first_dense, layers), every freq-th
        mlp_total = moe_layers * moe + (layers - moe_layers) * dense_ffn
    else:
        mlp_total = layers * dense_ffn
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return int(layers * attn + mlp_total + embed)
