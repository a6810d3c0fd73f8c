"""Advice that names who else holds the GPU: each foreign holder with what it costs the KV pool,
the rest in one action, and memory no listed process accounts for. The server's own processes
(its Ray host worker, launcher, sibling stages and peer ranks) are never a target to stop."""

from __future__ import annotations

from oomdoctor.advice.context import Context
from oomdoctor.judge.holders import top
from oomdoctor.model import Action


def holder_action(ctx: Context, pid: int, gib: float, where: str, detail: str) -> Action:
    y = ctx.sglang.mem_fraction_static
    cost = f"; it costs the KV pool {y * gib:.2f} GiB (y × held = {y:.2f} × {gib:.2f})" if y else ""
    actor = ctx.primary.line.actor_pid if ctx.primary else None
    if actor is not None and pid == actor:  # never a target to stop: the server runs inside it
        saver = (
            "call torch.cuda.empty_cache() in the trainer before vLLM's wake_up"
            if ctx.family == "vllm"
            else "use SGLang's memory saver (torch_memory_saver)"
        )
        return Action(
            text=f"Process {pid}{detail} holds {gib:.2f} GiB on {where}: it is the Ray worker "
            "that hosts this server (the co-located trainer runs in it), so stopping it stops the "
            "server too. Free what the trainer holds in it before rollout: offload its weights, "
            f"gradients and optimizer state, or {saver}{cost}.",
        )
    return Action(
        text=f"Process {pid}{detail} holds {gib:.2f} GiB on {where}: stop it, move it to another "
        f"GPU, or release its memory before the server runs{cost}.",
    )


def _more(count: int, gib: float, where: str) -> Action:
    """The holders past the largest few: one action for all of them."""
    return Action(
        text=f"{count} more processes hold {gib:.2f} GiB together on {where}: the largest are "
        "named above; `nvidia-smi` on the host lists them all.",
    )


def snapshot_holders(ctx: Context) -> list[Action]:
    gpu = ctx.gpu
    if gpu is None or gpu.snapshot is None:
        return []
    out = []
    sized = [h for h in gpu.foreign if h.gib is not None]
    shown = top(sized, lambda h: h.gib)
    for h in (sized[i] for i in shown.kept):
        assert h.gib is not None
        name = h.name or "unknown name: another PID namespace"
        if h.why.startswith("possibly another server"):
            name += ", possibly another server"  # named like one; nothing ties it to the log
        since = {True: ", there since before the server started", False: ", arrived after start"}
        detail = (
            f" ({name}{since.get(h.present_at_start, '')})"
            if h.present_at_start is not None
            else f" ({name})"
        )
        where = h.device.label if h.device is not None else "the server's GPU"
        out.append(holder_action(ctx, h.pid, h.gib, where, detail))
    if shown.more:
        out.append(_more(shown.more, shown.more_gib, "the server's GPUs"))
    for dev, gap in gpu.unattributed:
        out.append(
            Action(
                text=f"{gap:.2f} GiB in use on {dev.label} belongs to no listed process (another "
                "container, or a driver-level allocation): check `nvidia-smi` on the host.",
            )
        )
    return out


def message_holders(ctx: Context) -> list[Action]:
    if ctx.oom is None:
        return []
    oom, view = ctx.oom.message, ctx.oom.holders
    where = f"GPU {oom.gpu}" if oom.gpu is not None else "the GPU"
    foreign = [h for h in view.holders if h.role == "foreign"]
    shown = top(foreign, lambda h: h.gib)
    out = [
        holder_action(ctx, h.pid or 0, h.gib, where, "") for h in (foreign[i] for i in shown.kept)
    ]
    if shown.more:
        out.append(_more(shown.more, shown.more_gib, where))
    hidden = view.hidden_gib or 0.0
    if hidden > 2.0 and view.self_estimated:
        own = (view.unattributed_gib or 0.0) - hidden
        out.append(
            Action(
                text=f"{view.unattributed_gib:.2f} GiB in use on {where} is outside this "
                f"process's PyTorch allocator and no process the message lists holds it; at most "
                f"{own:.2f} GiB of that can be this process's own CUDA context and workspaces, so "
                f"≥ {hidden:.2f} GiB belongs to another process (another container or PID "
                "namespace): check `nvidia-smi` on the host, or run `oomdoctor snapshot` there.",
            )
        )
    elif hidden > 2.0:
        out.append(
            Action(
                text=f"{hidden:.2f} GiB in use on {where} belongs to no process the message lists "
                "(another container or PID namespace): check `nvidia-smi` on the host, or run "
                "`oomdoctor snapshot` there.",
            )
        )
    return out
