"""Advice for a Ray worker killed for lack of host memory (docs/reference-ray-oom.md).

Ray's memory monitor kills a worker when the node's RAM passes `RAY_memory_usage_threshold`;
without its report, a worker that vanished may have met the kernel's OOM killer. Neither is GPU
memory: the engine's fraction flags do not change it. The levers are what fills the host's RAM
in an SGLang / vLLM / veRL stack, and Ray's own knobs.
"""

from __future__ import annotations

from oomdoctor.advice.context import Context
from oomdoctor.model import Action, Fact

#: What fills a node's RAM around an LLM engine, in the words of each project's flags.
HOST_HOLDERS = (
    "weights loaded to CPU before they move to the GPU (each TP rank, FSDP rank or engine "
    "loading its own full copy at the same moment)",
    "CPU offload (vLLM --cpu-offload-gb and --swap-space, SGLang --cpu-offload-gb and its "
    "hierarchical cache --hicache-size/--hicache-ratio, veRL/FSDP param_offload and "
    "optimizer_offload)",
    "pinned (page-locked) buffers, which the kernel cannot swap out",
    "many processes: one per GPU worker, tokenizer/detokenizer and dataloader workers, and "
    "Ray's object store in shared memory (/dev/shm)",
)


def _figures(facts: tuple[Fact, ...]) -> Fact | None:
    """The first report that carries the node's memory figures."""
    for fact in facts:
        if fact.num("used_gib") is not None and fact.num("total_gib") is not None:
            return fact
    return None


def _monitor_text(facts: tuple[Fact, ...], flag: str) -> str:
    text = "Not GPU memory: Ray's memory monitor killed a worker because the node's RAM was full"
    fig = _figures(facts)
    if fig is not None:
        used, total = fig.num("used_gib") or 0.0, fig.num("total_gib") or 0.0
        share = used / total if total else None
        text += f" ({used:.2f} of {total:.2f} GiB in use"
        if share is not None:
            text += f", {share:.1%}"
        threshold = fig.num("threshold")
        if threshold is not None:
            text += f", over the kill threshold {threshold:g}"
        text += ")"
        held, pid = fig.num("process_gib"), fig.num("pid")
        if held is not None:
            who = f"pid {int(pid)}" if pid is not None else "the killed worker"
            text += f"; {who} itself held {held:.2f} GiB"
    return text + f". {flag} does not change it: it sizes GPU memory."


def _holders_text(where: str) -> str:
    return (
        f"Find what filled the RAM ({where}). Around an LLM engine the usual holders are: "
        + "; ".join(HOST_HOLDERS)
        + ". Load weights one rank at a time or from a shared copy, offload less, run fewer "
        "workers or concurrent tasks on the node (request more CPUs per task), or give the node "
        "(or the container's memory limit) more RAM."
    )


_RAY_KNOBS = (
    "Ray's own knobs, set in the environment before `ray start` / `ray.init()`: "
    "RAY_memory_usage_threshold (default 0.95, the share of node RAM at which the monitor kills) "
    "only moves the kill closer to the kernel's OOM killer; RAY_memory_monitor_refresh_ms=0 "
    "turns the monitor off, and the kernel then kills without Ray's report. max_retries (tasks) "
    "or max_restarts with max_task_retries (actors) let Ray retry after such a kill; that "
    "helps only if the peak was a coincidence of tasks."
)


def host_memory(ctx: Context) -> list[Action]:
    """A worker killed by Ray's memory monitor, or one that vanished (the kernel's OOM killer?)."""
    primary = ctx.primary
    if primary is not None and primary.kind == "ray_worker_died":
        return _vanished(ctx)
    facts = ctx.incident.facts_of("ray_oom_kill")
    return [
        Action(text=_monitor_text(facts, ctx.fraction_flag)),
        Action(
            text=_holders_text(
                "the 'Top 10 memory users' in Ray's message, `ray logs raylet.out -ip <node>`, "
                "`free -g`"
            )
        ),
        Action(alternative=True, text=_RAY_KNOBS),
    ]


def _vanished(ctx: Context) -> list[Action]:
    primary = ctx.primary
    code = primary.data.get("code") if primary is not None else None
    how = f" (connection error code {code})" if code is not None else ""
    return [
        Action(
            text=f"Probably not GPU memory: a Ray worker died without saying why{how}. Ray names "
            "three causes: the kernel's OOM killer (host RAM), `ray stop --force`, or a crash "
            "(SIGSEGV). Check which on that node: `dmesg -T | grep -i -E 'killed process|out of "
            "memory'` names the PID the kernel killed; the worker's own log (`ray logs "
            "worker-<id>*out`) shows a crash. The log has no GPU out-of-memory before it."
        ),
        Action(
            text=_holders_text(
                "if it was the OOM killer: `free -g`, the container's memory limit; Ray's memory "
                "monitor did not act, so the kernel's or the container's limit came first"
            )
        ),
        Action(alternative=True, text=_RAY_KNOBS),
    ]
