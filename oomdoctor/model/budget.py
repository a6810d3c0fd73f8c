"""The memory budget of the engine that printed the log (SGLang's or vLLM's).

No ``from __future__ import annotations`` here: typing.NamedTuple compiles every field annotation
given as a string (a ForwardRef), which made defining these records take twice as long.
"""

from typing import NamedTuple, TypeAlias


class RankBudget(NamedTuple):
    rank: str
    pre_gib: float | None
    post_gib: float | None
    weights_gib: float | None
    kv_gib: float | None
    stage: str | None = None  # a pipeline stage's own budget (SGLang Omni)
    gpu: int | None = None
    mem_fraction_static: float | None = None  # that stage's own y
    kv_logged_gib: float | None = None


class Window(NamedTuple):
    """The workable range of an engine's memory fraction (SGLang's y, vLLM's u), with why.

    Below ``low`` the KV cache is too small; above ``high`` too little is left for the runtime.
    """

    low: float | None = None
    low_basis: str | None = None
    high: float | None = None
    high_basis: str | None = None

    @property
    def empty(self) -> bool | None:
        """No fraction satisfies both ends (None: an end is unknown)."""
        if self.low is None or self.high is None:
            return None
        return self.low > self.high


class SglangBudget(NamedTuple):
    """SGLang's budget of DESIGN §2: y of the memory free before loading holds weights and the
    KV pool (GiB; None = the log does not say). The window is on y (--mem-fraction-static)."""

    rank: str | None = None  # the tightest rank, whose numbers these are
    stage: str | None = None  # the pipeline stage whose budget this is (SGLang Omni)
    gpu: int | None = None  # that stage's GPU
    pre_gib: float | None = None
    post_gib: float | None = None
    weights_gib: float | None = None
    mem_fraction_static: float | None = None
    mem_fraction_source: str | None = None
    static_gib: float | None = None
    dynamic_gib: float | None = None
    kv_gib: float | None = None  # computed: post − (1 − y)·pre
    kv_logged_gib: float | None = None
    kv_tokens: int | None = None
    bytes_per_token: int | None = None
    context_len: int | None = None
    graph_gib: float | None = None
    headroom_gib: float | None = None  # free after pool and graphs (runtime headroom)
    capacity_gib: float | None = None
    y_zero: float | None = None  # the fraction at which the KV pool is exactly empty
    window: Window = Window()
    reserve_gib: float | None = None
    ranks: tuple[RankBudget, ...] = ()
    notices: tuple[str, ...] = ()
    weights_share: float | None = None  # weights / pre
    kv_reserve_gib: float = 0.0  # 0.5.23: set aside from the KV budget for multimodal buffers
    fraction_factor: float = 1.0  # SGLang multiplies the flag by this (0.3.6/0.4.6 VLMs, aiter)
    fraction_factor_why: str | None = None

    @property
    def engine(self) -> str:
        return "sglang"


class VllmBudget(NamedTuple):
    """vLLM's budget: a share u of TOTAL memory holds weights, activations and the KV cache
    together (GiB; None = the log does not say). The window is on u (--gpu-memory-utilization)."""

    gpu_memory_utilization: float | None = None
    utilization_source: str | None = None
    capacity_gib: float | None = None
    budget_gib: float | None = None  # total × u
    weights_gib: float | None = None
    activation_gib: float | None = None  # PyTorch activation peak of the profile run
    non_torch_gib: float | None = None
    kv_gib: float | None = None
    kv_tokens: int | None = None
    bytes_per_token: int | None = None
    max_model_len: int | None = None
    kv_needed_gib: float | None = None  # KV for one request of max_model_len
    startup_short_gib: float | None = None  # the start-up check: requested − free
    graph_gib: float | None = None
    window: Window = Window()
    notices: tuple[str, ...] = ()

    @property
    def engine(self) -> str:
        return "vllm"


#: The budget of whichever engine printed the log.
Budget: TypeAlias = SglangBudget | VllmBudget
