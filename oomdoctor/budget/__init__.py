"""Stage 4, budget: every formula of DESIGN §2, for SGLang (y of the free memory) and vLLM (u of
the total), rebuilt from the log's own numbers; the judgements made from them (who held the
card, what the shortfall was); SGLang's defaults per release; and `plan` before a launch."""

from __future__ import annotations

from oomdoctor.budget import sglang, vllm
from oomdoctor.knowledge import family
from oomdoctor.model import Budget, Failure, Incident


def build(
    incident: Incident, primary: Failure | None, capacity_hint: float | None = None
) -> Budget:
    """The budget of the incident's engine; ``primary`` is the failure being diagnosed.

    ``capacity_hint`` is the GPU's total memory from a snapshot, for logs that do not print it
    (vLLM V1 at INFO)."""
    if family(incident.engine) == "vllm":
        return vllm.build(incident, primary, capacity_hint)
    return sglang.build(incident, primary)
