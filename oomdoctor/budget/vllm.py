"""vLLM's memory budget, rebuilt from its log (reference: vllm-logs.md).

    budget  = total × u                   u = --gpu-memory-utilization (default 0.9)
    KV      = budget − (weights + activation peak + non-torch)
    outside = total × (1 − u)             CUDA graphs, the CUDA context, other processes

So u is not SGLang's y: it covers weights, activations AND the KV cache, and the memory it leaves
out is what CUDA graphs and everything after the profile run live in. Raising u grows the KV cache
by total × Δu; lowering it gives that much back to the outside. GiB throughout.
"""

from __future__ import annotations

from collections.abc import Iterable

from oomdoctor.budget.formulas import (
    CONTEXT_OVERHEAD_GIB,
    GIB,
    round_down,
    round_up,
    snap_between,
    snap_bytes_per_token,
)
from oomdoctor.incident.stages import line_stage
from oomdoctor.model import Fact, Failure, Incident, VllmBudget, Window, number

DEFAULT_UTILIZATION = 0.9
DEFAULT_BLOCK_SIZE = 16
DEFAULT_SWAP_GIB = 4.0
#: Room kept beyond a measured shortfall (allocator rounding, the next allocation of the peak).
MARGIN_GIB = 1.0


def _nums(facts: Iterable[Fact], key: str) -> list[float]:
    return [v for v in (f.num(key) for f in facts) if v is not None]


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _utilization(
    incident: Incident, profile: list[Fact], failure: Failure | None
) -> tuple[float | None, str | None]:
    for fact in profile:
        u = fact.num("u")
        if u is not None and 0 < u <= 1:
            return u, "the memory profiling line"
    if failure is not None:
        u = number(failure.data.get("u"))
        if u is not None and 0 < u <= 1:
            return u, "the error message"
    u = number(incident.server_args.get("gpu_memory_utilization"))
    if u is not None and 0 < u <= 1:
        return u, "the engine arguments"
    args = incident.server_args
    if args.get("_vllm_non_default_args"):
        return DEFAULT_UTILIZATION, "vLLM's default (not among the non-default args)"
    return None, None


def _own_stage(incident: Incident, primary: Failure | None, kind: str) -> list[Fact]:
    """A vLLM-Omni log holds every stage's profiling lines: keep the failing stage's own (and
    the lines no stage claims); a plain vLLM log keeps them all."""
    facts = list(incident.facts_of(kind))
    stage = primary.stage if primary is not None else None
    if stage is None:
        return facts
    return [f for f in facts if line_stage(f.line) in (None, stage)]


def _int_arg(incident: Incident, name: str) -> int | None:
    value = incident.server_args.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def build(
    incident: Incident, primary: Failure | None, capacity_hint: float | None = None
) -> VllmBudget:
    notices: list[str] = []
    profile = _own_stage(incident, primary, "vllm_profile")
    kv_facts = _own_stage(incident, primary, "vllm_kv")
    startup = next(
        (f for f in incident.failures if f.kind in ("startup_free_memory", "startup_kv_error")),
        None,
    )
    failure = primary or startup
    u, u_source = _utilization(incident, profile, failure)

    oom = primary.oom if primary else None
    data = failure.data if failure else {}
    total = _first(
        max(_nums(profile, "total") + _nums(profile, "total_gpu_memory"), default=None),
        number(data.get("total")),
        oom.total_gib if oom else None,
        # PyTorch 2.13+'s allocator warnings print the device's total (cudaMemGetInfo)
        max(_nums(incident.facts_of("alloc_retry"), "device_total_gib"), default=None),
        capacity_hint,
    )
    budget_printed = max(_nums(profile, "budget"), default=None)
    if total is None and budget_printed is not None and u:
        total = budget_printed / u
    budget = budget_printed if budget_printed is not None else (total * u if total and u else None)

    weights = _first(
        max(_nums(profile, "w"), default=None),
        max(_nums(incident.facts_of("vllm_weights"), "w"), default=None),
    )
    activation = max(_nums(profile, "a"), default=None)
    peak_torch = max(_nums(profile, "peak_torch_memory"), default=None)
    if activation is None and peak_torch is not None and weights is not None:
        activation = peak_torch - weights  # 0.6.4 prints the torch peak including the weights
    non_torch = max(_nums(profile, "n") + _nums(profile, "non_torch_memory"), default=None)
    kv = _first(
        min(_nums(profile, "kv") + _nums(profile, "kv_cache_size"), default=None),
        min(_nums(kv_facts, "kv"), default=None),
        number(data.get("available")),
    )
    if kv is None and None not in (budget, weights, activation, non_torch):
        kv = budget - weights - activation - non_torch  # type: ignore[operator]
    sized_from_blocks = kv is None
    if activation is None and weights is not None and kv is not None and budget is not None:
        notices.append(
            "vLLM prints the activation and non-torch parts of the profile only at DEBUG "
            "(VLLM_LOGGING_LEVEL=DEBUG); together they are budget − weights − KV = "
            f"{budget - weights - kv:.2f} GiB"
        )

    tokens_v = min(_nums(kv_facts, "tokens"), default=None)
    tokens = int(tokens_v) if tokens_v else None
    block = _int_arg(incident, "block_size") or DEFAULT_BLOCK_SIZE
    blocks = min(_nums(kv_facts, "blocks"), default=None)
    if tokens is None and blocks:
        tokens = int(blocks) * block  # V0: `# GPU blocks: N`
    if tokens is None and number(data.get("kv_tokens")):
        tokens = int(data["kv_tokens"])  # type: ignore[arg-type]
    max_len_v = _first(
        number(data.get("max_len")),
        number(_int_arg(incident, "max_model_len")),
        max(_nums(kv_facts, "len"), default=None),
    )
    max_len = int(max_len_v) if max_len_v else None
    needed = number(data.get("needed"))
    bpt = None
    if needed and max_len:
        bpt = round(needed * GIB / max_len)
    elif kv and kv > 0 and tokens:
        bpt = snap_bytes_per_token(kv, tokens)
    if bpt is None:
        bpt = _bpt_from_swap(incident, kv_facts, block)
    if needed is None and bpt and max_len:
        needed = max_len * bpt / GIB
    if sized_from_blocks and tokens and bpt:
        kv = tokens * bpt / GIB  # V0: what `# GPU blocks: N` sized (blocks × block bytes)
        notices.append(
            f"the KV cache is what the profile sized: {tokens:,} tokens × {bpt:,} B = {kv:.2f} GiB"
        )
    graph = max(_nums(incident.facts_of("vllm_graph"), "g"), default=None)

    if u is None:
        notices.append(
            "the log does not show --gpu-memory-utilization (no args, config or profile line)"
        )
    if total is None:
        notices.append("the log does not show the GPU's total memory")

    u_min = u_max = None
    u_min_basis = u_max_basis = None
    if u is not None and total and kv is not None:
        u_zero = u - kv / total
        if needed:
            u_min = round_up(u_zero + needed / total)
            u_min_basis = (
                f"a KV cache for one request of max_model_len ({max_len:,} tokens): "
                f"{needed:.2f} GiB"
            )
        else:
            u_min = round_up(u_zero + 0.005)
            u_min_basis = "a KV cache that is not empty (bytes per token unknown)"
    if total:
        u_max, u_max_basis = _upper(incident, primary, u, total, graph)

    return VllmBudget(
        gpu_memory_utilization=u,
        utilization_source=u_source,
        capacity_gib=total,
        budget_gib=budget,
        weights_gib=weights,
        activation_gib=activation,
        non_torch_gib=non_torch,
        kv_gib=kv,
        kv_tokens=tokens,
        bytes_per_token=bpt,
        max_model_len=max_len,
        startup_short_gib=_startup_short(primary),
        kv_needed_gib=needed,
        graph_gib=graph,
        window=Window(u_min, u_min_basis, u_max, u_max_basis),
        notices=tuple(notices),
    )


def _upper(
    incident: Incident, primary: Failure | None, u: float | None, total: float, graph: float | None
) -> tuple[float | None, str | None]:
    """The highest u that leaves enough outside the budget (or fits beside other processes)."""
    if primary is not None and primary.kind == "startup_free_memory":
        free = number(primary.data.get("free"))
        if free is not None:
            return round_down(
                free / total
            ), f"free memory at startup: {free:.2f} of {total:.2f} GiB"
    oom = primary.oom if primary else None
    if (
        u is not None
        and oom is not None
        and primary is not None
        and primary.phase == "running"
        and oom.requested_gib is not None
        and oom.free_gib is not None
    ):
        short = max(oom.requested_gib - oom.free_gib, 0.0)
        return (
            round_down(u - (short + MARGIN_GIB) / total),
            f"the failed allocation: {short:.2f} GiB missing plus a {MARGIN_GIB:.0f} GiB margin",
        )
    outside = (graph or 0.0) + CONTEXT_OVERHEAD_GIB + MARGIN_GIB
    what = f"CUDA graphs ({graph:.2f} GiB), " if graph else ""
    return (
        round_down(1.0 - outside / total),
        f"room outside the budget for {what}the CUDA context (~{CONTEXT_OVERHEAD_GIB} GiB) "
        f"and a {MARGIN_GIB:.0f} GiB margin",
    )


def _bpt_from_swap(incident: Incident, kv_facts: list[Fact], block: int) -> int | None:
    """V0 also sizes a CPU swap pool: `# CPU blocks: M` = floor(swap_space / block bytes), so the
    bytes per token follow even when no GPU block fits (swap_space: args, default 4 GiB)."""
    cpu = min(_nums(kv_facts, "cpu"), default=None)
    swap = number(incident.server_args.get("swap_space"))
    swap = DEFAULT_SWAP_GIB if swap is None else swap
    if not cpu or swap <= 0:
        return None
    total = swap * GIB
    return snap_between(total / ((cpu + 1) * block), total / (cpu * block), total / (cpu * block))


def _startup_short(primary: Failure | None) -> float | None:
    """How much more the start-up check asked for than was free (GiB)."""
    if primary is None or primary.kind != "startup_free_memory":
        return None
    free, requested = number(primary.data.get("free")), number(primary.data.get("requested"))
    return round(requested - free, 4) if free is not None and requested is not None else None
