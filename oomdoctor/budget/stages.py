"""Pipeline stages with budgets of their own (SGLang Omni): whose budget decides, each stage's
fraction, and Omni's colocated formula that replaces SGLang's for a stage with a budget."""

from __future__ import annotations

from oomdoctor.budget.formulas import omni_stage_kv
from oomdoctor.budget.fraction import y_used
from oomdoctor.model import Failure, Incident, RankMemory


def omni_colocated_kv(
    incident: Incident, primary: Failure | None, stage: RankMemory | None
) -> tuple[float, str] | None:
    """SGLang Omni with a stage budget replaces SGLang's formula for the stage (§6.2):
    KV = int(total × total_gpu_memory_fraction) − what the stage process already holds."""
    if incident.engine != "sglang-omni":
        return None
    name = stage.stage if stage is not None and stage.stage else "thinker"
    data = primary.data if primary is not None else {}
    total, fraction, used = data.get("total"), data.get("fraction"), data.get("used")
    mine = primary is not None and (primary.stage in (None, name))
    if (
        mine
        and isinstance(total, float)
        and isinstance(fraction, float)
        and isinstance(used, float)
    ):
        kv = omni_stage_kv(total, fraction, used)
        return kv, (
            f"Omni's colocated budget sized the {name}'s KV pool: int({total:.2f} × {fraction:.3f}) "
            f"− {used:.2f} GiB held by the stage = {kv:.2f} GiB (SGLang's own formula "
            "does not apply with a stage budget)"
        )
    if stage is not None and stage.omni_kv is not None:
        available = stage.omni_kv.value
        return available, (
            f"Omni's colocated budget sized the {name}'s KV pool: available_for_kv = "
            f"{available:.2f} GiB (int(total × the stage's fraction) − what the stage holds)"
        )
    return None


def budget_stage(incident: Incident, primary: Failure | None) -> RankMemory | None:
    """Whose budget to build when pipeline stages print their own checkpoints (SGLang Omni):
    the failing stage's own; else the engine stage on the failing GPU (the thinker first);
    else the thinker; else the last stage that loaded."""
    staged = [r for r in incident.ranks if r.stage]
    if not staged:
        return None
    if primary is not None and primary.stage:
        own = [r for r in staged if r.stage == primary.stage]
        if own:
            return own[0]
    gpu = _failing_gpu(incident, primary)
    if gpu is not None:
        on_gpu = [r for r in staged if r.gpu == gpu]
        if on_gpu:
            return next((r for r in on_gpu if r.stage == "thinker"), on_gpu[0])
    thinker = [r for r in staged if r.stage == "thinker"]
    return thinker[0] if thinker else staged[-1]


def _failing_gpu(incident: Incident, primary: Failure | None) -> int | None:
    if primary is None:
        return None
    if primary.oom is not None and primary.oom.gpu is not None:
        return primary.oom.gpu
    for fact in incident.facts_of("omni_device"):
        if primary.stage and fact.text("stage") == primary.stage:
            gpu = fact.num("gpu")
            return int(gpu) if gpu is not None else None
    return None


def stage_y(
    incident: Incident, r: RankMemory, y: float | None, chosen: RankMemory | None
) -> float | None:
    """Each stage's own fraction (its startup line, else what the KV line implies)."""
    if not r.stage or r is chosen:
        return y
    if r.fraction and 0 < r.fraction <= 1:
        return r.fraction
    own = y_used(incident, (r,))
    return round(own, 3) if own is not None and 0 < own < 1 else y
