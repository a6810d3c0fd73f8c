"""Stage 4, budget: every formula of DESIGN §2, for SGLang (y of the free memory) and vLLM (u of
the total), rebuilt from the log's own numbers; the judgements made from them (who held the
card, what the shortfall was); SGLang's defaults per release; and `plan` before a launch."""

from __future__ import annotations

from oomdoctor.budget import sglang, vllm
from oomdoctor.knowledge import family
from oomdoctor.model import Budget, Failure, Incident, SglangBudget, VllmBudget


def build(
    incident: Incident, primary: Failure | None, capacity_hint: float | None = None
) -> Budget:
    """The budget of the incident's engine; ``primary`` is the failure being diagnosed.

    ``capacity_hint`` is the GPU's total memory from a snapshot, for logs that do not print it
    (vLLM V1 at INFO)."""
    if family(incident.engine) == "vllm":
        return vllm.build(incident, primary, capacity_hint)
    return sglang.build(incident, primary)


def as_sglang(b: Budget) -> SglangBudget:
    """An SGLang-shaped budget for advice both engines share: the budget itself, or a vLLM
    budget's common figures (weights, KV, tokens, graphs, capacity, context) and nothing of y."""
    if isinstance(b, SglangBudget):
        return b
    return SglangBudget(
        weights_gib=b.weights_gib,
        kv_gib=b.kv_gib,
        kv_tokens=b.kv_tokens,
        bytes_per_token=b.bytes_per_token,
        context_len=b.max_model_len,
        graph_gib=b.graph_gib,
        capacity_gib=b.capacity_gib,
    )


def as_vllm(b: Budget) -> VllmBudget:
    """A vLLM-shaped budget: the budget itself, or an SGLang budget's common figures and
    nothing of u (a log whose engine is unknown gets both engines' advice)."""
    if isinstance(b, VllmBudget):
        return b
    return VllmBudget(
        capacity_gib=b.capacity_gib,
        weights_gib=b.weights_gib,
        kv_gib=b.kv_gib,
        kv_tokens=b.kv_tokens,
        bytes_per_token=b.bytes_per_token,
        graph_gib=b.graph_gib,
    )
