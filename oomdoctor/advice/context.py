"""What advice generators read: the incident, its budget, the failure, version-aware flag names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.incident.versions import at_least, at_most
from oomdoctor.model import Action, Budget, Failure, Incident, SglangBudget, VllmBudget
from oomdoctor.rules.features import Feature

if TYPE_CHECKING:
    from oomdoctor.gpu.view import GpuView
    from oomdoctor.judge.oom import OomJudgement


class Context(NamedTuple):
    incident: Incident
    budget: Budget
    primary: Failure | None
    features: Mapping[str, Feature]
    gpu: GpuView | None = None
    remedy: str | None = None  # the winning rule's remedy text (advice kind "remedy")
    oom: OomJudgement | None = None  # the failed allocation's numbers, judged (judge.oom)

    # -- the budget in each engine's shape ------------------------------------------------------
    @property
    def sglang(self) -> SglangBudget:
        """The budget for SGLang's advice (a vLLM budget's shared figures, nothing of y)."""
        from oomdoctor.budget import as_sglang

        return as_sglang(self.budget)

    @property
    def vllm(self) -> VllmBudget:
        """The budget for vLLM's advice (an SGLang budget's shared figures, nothing of u)."""
        from oomdoctor.budget import as_vllm

        return as_vllm(self.budget)

    # -- engine-aware flag names ---------------------------------------------------------------
    @property
    def family(self) -> str | None:
        """``sglang`` or ``vllm``: whose flags the advice names (None: the log cannot tell)."""
        from oomdoctor.knowledge import family

        return family(self.incident.engine)

    @property
    def fraction_flag(self) -> str:
        """The flag that sizes the engine's static memory, in this engine's terms."""
        return {
            "sglang": "--mem-fraction-static",
            "vllm": "--gpu-memory-utilization",
        }.get(self.family or "", "--mem-fraction-static (SGLang) / --gpu-memory-utilization (vLLM)")

    # -- version-aware flag names (0.5.23 renamed the CUDA-graph knobs) -------------------------
    @property
    def new_graph_flags(self) -> bool | None:
        v = self.incident.version
        if at_least(v, "0.5.23"):
            return True
        if at_most(v, "0.5.10"):
            return False
        return None  # unknown: name both

    def graph_bs_flag(self, prefill: bool = False) -> str:
        if self.new_graph_flags is True:
            return "--cuda-graph-max-bs-prefill" if prefill else "--cuda-graph-max-bs-decode"
        return "--cuda-graph-max-bs"

    def graph_bs_note(self) -> str:
        if self.new_graph_flags is None:
            return " (`--cuda-graph-max-bs-decode` from SGLang 0.5.23 on)"
        return ""

    def disable_graph_flag(self) -> str:
        if self.new_graph_flags is True:
            return "--cuda-graph-backend-decode=disabled"
        return "--disable-cuda-graph"

    # -- current values -------------------------------------------------------------------------
    def arg_int(self, name: str) -> int | None:
        if name == "tp_size":
            return self.incident.tp_size
        value = self.incident.server_args.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        summary = self.incident.summary
        alias = {"chunked_prefill_size": "chunked", "max_running_requests": "max_running"}.get(name)
        if summary is not None and alias:
            num = summary.num(alias)
            return int(num) if num is not None else None
        return None

    def graph_max_bs(self) -> int | None:
        bs = self.arg_int("cuda_graph_max_bs")
        if bs is not None:
            return bs
        config = self.incident.server_args.get("cuda_graph_config")
        if isinstance(config, str):
            import re

            m = re.search(r"'decode': \{[^}]*'max_bs': (\d+)", config)
            if m:
                return int(m.group(1))
        return None

    @property
    def shortfall(self) -> float | None:
        """requested − free of the failed allocation (None: no GPU OOM, or no numbers)."""
        return self.oom.shortfall_gib if self.oom is not None else None

    def margin(self) -> float:
        """Room planned beyond the failed allocation (budget.targets.runtime_margin)."""
        from oomdoctor.budget.targets import runtime_margin

        return runtime_margin(self.sglang.dynamic_gib)


def halve(flag: str, current: int | None, why: str, example: int | None = None) -> Action:
    """`Lower FLAG (N → N/2): why`, or `(e.g. X)` when the log does not say today's value."""
    if current:
        new = max(current // 2, 1)
        return Action(
            text=f"Lower {flag} ({current} → {new}): {why}",
            flag=flag,
            direction="lower",
            value=new,
            current=current,
        )
    hint = f" (e.g. {example})" if example else ""
    return Action(text=f"Lower {flag}{hint}: {why}", flag=flag, direction="lower", value=example)
