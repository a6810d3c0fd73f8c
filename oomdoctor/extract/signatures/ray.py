"""Ray's own reports that a worker died for lack of HOST memory (docs/reference-ray-oom.md).

Ray's memory monitor (raylet, Ray 2.x) kills a worker when the node's RAM passes
`RAY_memory_usage_threshold`; the caller then sees `ray.exceptions.OutOfMemoryError` (a task) or
an `ActorDiedError` whose exit type is NODE_OUT_OF_MEMORY (an actor), and the raylet counts the
kills. The kernel's OOM killer gives no such report: the worker just vanishes, and Ray names the
OOM killer as one of three possible causes. Neither is GPU memory.
"""

from __future__ import annotations

import re

from oomdoctor.extract.signatures.base import Builder, Signature, convert, sig
from oomdoctor.model import Scalar


def _numbers(form: str) -> Builder:
    """The named groups as numbers, tagged with the message's form. Ray prints host memory in
    "GB" that are GiB (bytes / 1024³), hence the ``_gib`` keys."""

    def build(m: re.Match[str]) -> dict[str, Scalar]:
        data: dict[str, Scalar] = {"form": form}
        for key, value in m.groupdict().items():
            if value is not None and not key.startswith("form_"):
                data[key] = convert(value, gib=key.endswith("_gib"))
        return data

    return build


def _summary(m: re.Match[str]) -> dict[str, Scalar] | None:
    """The raylet's periodic count: only a count of memory kills above zero is one."""
    killed = convert(m.group("killed"))
    if not isinstance(killed, int) or killed <= 0:
        return None
    return {"form": "raylet_summary", "killed": killed, "crashed": convert(m.group("crashed"))}


SIGNATURES: tuple[Signature, ...] = (
    # --- Ray's memory monitor killed the worker (certain) ----------------------------------------
    sig(  # the worker's exit detail, 2.x – 2.55 ("Task was ...") and 2.56+ ("N worker(s) were ...")
        "ray_oom_kill",
        ("killed due to the node running low", "node running low on memory"),
        r"(?P<form_detail>Task was killed|(?P<workers>\d+) worker\(s\) were killed) due to the "
        r"node running low|node running low on memory",
        _numbers("exit_detail"),
        description="Ray's memory monitor killed a worker: the node's host RAM passed the "
        "threshold",
    ),
    sig(  # 2.x – 2.55: "... where the task (...) was running was U GB / T GB (r), which exceeds ..."
        "ray_oom_kill",
        "which exceeds the memory usage threshold of",
        r"(?:pid=(?P<pid>\d+), memory used=(?P<process_gib>[\d.]+)GB\) was running was )?"
        r"(?P<used_gib>[\d.]+)GB / (?P<total_gib>[\d.]+)GB \((?P<fraction>[\d.e-]+)\), which "
        r"exceeds the memory usage threshold of (?P<threshold>[\d.]+)",
        _numbers("monitor"),
        description="Ray's memory monitor: node memory used / total, over the kill threshold",
    ),
    sig(  # 2.56+: "Memory on the node (IP: A, ID: N) was U GB used / T GB limit (r)"
        "ray_oom_kill",
        "GB limit (",
        r"Memory on the node \(IP: [^,]*, ID: \w+\) was (?P<used_gib>[\d.]+)GB used / "
        r"(?P<total_gib>[\d.]+)GB limit \((?P<fraction>[\d.e-]+)\)",
        _numbers("monitor"),
        description="Ray's memory monitor (2.56+): node memory used / limit",
    ),
    sig(
        "ray_oom_kill",
        "killed due to memory pressure (OOM)",
        r"(?P<killed>\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\), "
        r"(?P<crashed>\d+) Workers crashed due to other reasons",
        _summary,
        description="the raylet's count of workers its memory monitor killed",
    ),
    sig(  # the exit type alone survives any wrap: one word
        "ray_oom_kill",
        "NODE_OUT_OF_MEMORY",
        r"\bNODE_OUT_OF_MEMORY\b",
        lambda m: {"form": "exit_type"},
        description="an actor's death cause: its worker was killed for node memory",
    ),
    sig(  # Ray 1.x's Python monitor (2.x keeps it for tests only)
        "ray_oom_kill",
        "of the memory on node",
        r"More than (?P<percent>\d+)% of the memory on node \S+ is used \((?P<used_gib>[\d.]+) / "
        r"(?P<total_gib>[\d.]+) GB\)",
        _numbers("monitor_1x"),
        description="Ray 1.x's memory monitor: node memory over the error threshold",
    ),
    # --- a worker vanished; Ray lists the kernel's OOM killer among the causes (uncertain) --------
    sig(  # the causes sentence in 2.x and 2.56+ words; its parts, for a paste that wrapped it
        "ray_worker_died",
        (
            "Worker unexpectedly exits with a connection error code",
            "by SIGKILL by OOM killer",
            "killed by the OOM killer due to high memory usage",
            "ray stop --force is called",
            "ray stop --force was called",
        ),
        r"Worker unexpectedly exits with a connection error code (?P<code>\d+)"
        r"|by SIGKILL by OOM killer|killed by the OOM killer due to high memory usage"
        r"|ray stop --force (?:is|was) called",
        lambda m: {"code": convert(m.group("code"))},
        description="a Ray worker died without reporting why (SIGKILL by the kernel's OOM "
        "killer, `ray stop --force`, or a crash)",
    ),
)
