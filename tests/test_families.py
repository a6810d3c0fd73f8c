"""The other members of three failure families (docs/reference-ray-oom.md): Ray's host-memory
kills, vLLM's profiling guard in every release's words, SGLang 0.1.x - 0.2.x's pool check.

Each case is built from a fixture's own lines (reordered, cut, prefixed, wrapped) or from a
template the reference note quotes, so every input keeps the emitting project's format."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.rules.schema import Rule
from tests.conftest import FIXTURES

Run = Callable[[list[str]], Diagnosis]


@pytest.fixture()
def run(tmp_path: Path, rules: tuple[Rule, ...]) -> Run:
    counter = iter(range(10**6))

    def diagnose(lines: list[str]) -> Diagnosis:
        path = tmp_path / f"case-{next(counter)}.log"
        path.write_text("\n".join(lines) + "\n", "utf-8")
        return pipeline.run([str(path)], rules)

    return diagnose


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text("utf-8").splitlines()


MONITOR = "ray-verl/host-memory-monitor-kill.log"
VANISHED = "ray-verl/worker-died-oom-killer.log"
GPU_THEN_SIGKILL = "ray-verl/actor-died-after-gpu-oom.log"


def _verdict(d: Diagnosis) -> tuple[str, str | None]:
    return d.verdict.category, d.verdict.rule


# --- Ray -----------------------------------------------------------------------------------------


def test_the_driver_traceback_alone_is_the_memory_monitor(run: Run) -> None:
    """A paste of the exception only (from `ray.exceptions.RayTaskError(ActorDiedError)` on)."""
    lines = _lines(MONITOR)
    start = next(i for i, t in enumerate(lines) if t.startswith("ray.exceptions.RayTaskError"))
    assert _verdict(run(lines[start:])) == ("not_oom", "ray-memory-monitor-kill")


def test_a_task_killed_by_the_monitor_is_not_a_gpu_oom(run: Run) -> None:
    """`ray.exceptions.OutOfMemoryError` is Ray's class: host memory, whatever the words say."""
    task = [
        "Traceback (most recent call last):",
        '  File "/workspace/batch.py", line 31, in <module>',
        "    outputs = ray.get(refs)",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ]
    d = run(task)
    assert _verdict(d) == ("not_oom", "ray-memory-monitor-kill")
    assert d.oom is None


def test_the_message_inside_an_actor_prefix(run: Run) -> None:
    """The same report relayed from an actor that logged it: `(TaskRunner pid=N) ` on each line."""
    lines = [f"(TaskRunner pid=2051) {t}" if t else t for t in _lines(MONITOR)[14:]]
    assert _verdict(run(lines)) == ("not_oom", "ray-memory-monitor-kill")


def test_the_monitor_message_wrapped_keeps_its_figures(run: Run) -> None:
    """A hard wrap (an e-mail, an issue body) inside the long `Memory on the node` line."""
    lines = _lines(MONITOR)
    at = next(i for i, t in enumerate(lines) if t.startswith("Memory on the node"))
    text = lines[at]
    cut = text.index(" Ray killed this worker")
    d = run([*lines[at - 1 : at], text[:cut], text[cut + 1 :]])
    assert _verdict(d) == ("not_oom", "ray-memory-monitor-kill")
    texts = " ".join(a.text for a in d.actions)
    assert "478.70 of 503.71 GiB" in texts


def test_ray_1x_memory_monitor(run: Run) -> None:
    """Ray 1.x's Python monitor (RayOutOfMemoryError.get_message)."""
    line = (
        "ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node "
        "gpu-node-3 is used (121.6 / 125.8 GB). The top 10 memory consumers are:"
    )
    d = run([line])
    assert _verdict(d) == ("not_oom", "ray-memory-monitor-kill")
    assert "121.60 of 125.80 GiB" in d.actions[0].text


def test_an_earlier_gpu_oom_wins_over_a_later_host_kill(run: Run) -> None:
    """A real GPU OOM before Ray's kill stays the diagnosis: the kill must not hide it."""
    gpu = _lines(GPU_THEN_SIGKILL)[:21]
    d = run(gpu + _lines(MONITOR)[11:])
    assert _verdict(d)[0] == "runtime_activation"


def test_a_gpu_oom_relayed_after_rays_death_report_still_wins(run: Run) -> None:
    """Ray relays actor output asynchronously: its generic death text (naming the OOM killer)
    can come before the actor's own CUDA OOM; the OOM still decides."""
    lines = _lines(GPU_THEN_SIGKILL)
    ray_first = lines[21:] + lines[:21]
    assert _verdict(run(ray_first))[0] == "runtime_activation"


def test_zero_monitor_kills_is_no_memory_kill(run: Run) -> None:
    """`0 Workers ... killed due to memory pressure (OOM), 1 Workers crashed` counts a crash."""
    summary = next(t for t in _lines(VANISHED) if "killed due to memory pressure" in t)
    assert "0 Workers" in summary
    assert run([summary]).verdict.rule != "ray-memory-monitor-kill"


def test_ray_2_56_worker_death_wording(run: Run) -> None:
    """2.56+'s exit detail alone (the figures cut off by the paste)."""
    line = next(t for t in _lines("vllm-0.33.0/ray-worker-oom-killed.log") if "were killed" in t)
    head = line[: line.index(" Memory on the node")]
    assert _verdict(run([head])) == ("not_oom", "ray-memory-monitor-kill")


def test_ray_2_56_kernel_oom_killer_wording(run: Run) -> None:
    """2.56+'s `Some common causes include: (1) the process was killed by the OOM killer`."""
    line = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. "
        "To troubleshoot the problem, check the logs for the dead worker. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. "
        "End of file. Some common causes include: (1) the process was killed by the OOM killer due "
        "to high memory usage, (2) ray stop --force was called, or (3) the worker crashed "
        "unexpectedly due to SIGSEGV or another unexpected error."
    )
    d = run([line])
    assert _verdict(d) == ("not_oom", "ray-worker-died")
    assert d.verdict.confidence < 0.9
    assert "dmesg" in d.actions[0].text


# --- vLLM's profiling guard ----------------------------------------------------------------------

PROFILING = "vllm-0.6.3/profiling-not-cleaned-up.log"


@pytest.mark.parametrize(
    ("message", "wording"),
    [
        (  # 0.4.2 - 0.5.3: no figures
            "AssertionError: Error in memory profiling. This happens when the GPU memory was not "
            "properly cleaned up before initializing the vLLM instance.",
            "cleanup",
        ),
        (  # 0.7 - 0.10 V0: used memory, bytes
            "AssertionError: Error in memory profiling. Initial used memory 40619737088, currently "
            "used memory 24481103872. This happens when the GPU memory was not properly cleaned up "
            "before initializing the vLLM instance.",
            "cleanup",
        ),
        (  # 0.14+ V1: format_gib
            "AssertionError: Error in memory profiling. Initial free memory 42.17 GiB, current free "
            "memory 62.25 GiB. This happens when other processes sharing the same container release "
            "GPU memory while vLLM is profiling during initialization. To fix this, ensure "
            "consistent GPU memory allocation or isolate vLLM in its own container.",
            "other_processes",
        ),
    ],
    ids=["0.4-no-figures", "0.7-used-bytes", "0.14-format-gib"],
)
def test_every_profiling_guard_wording(run: Run, message: str, wording: str) -> None:
    lines = [*_lines(PROFILING)[:-1], message]
    d = run(lines)
    assert _verdict(d) == ("cotenant_pressure", "vllm-cotenant-check")
    assert d.incident.primary is not None
    assert d.incident.primary.data["wording"] == wording


def test_profiling_guard_figures_in_bytes_are_read_as_gib(run: Run) -> None:
    d = run(_lines(PROFILING))
    primary = d.incident.primary
    assert primary is not None
    assert primary.data["initial"] == pytest.approx(7.25)
    assert primary.data["current"] == pytest.approx(62.20, abs=0.01)
    assert "54.95 GiB more was free" in d.actions[0].text


def test_a_real_oom_in_the_profile_run_is_not_the_guard(run: Run) -> None:
    lines = _lines("vllm-0.6.4/mllama-profile-run-oom.log")
    assert run(lines).verdict.rule != "vllm-cotenant-check"


# --- SGLang 0.1.x - 0.2.x pool check -------------------------------------------------------------

LEGACY = "sglang-0.1.20/legacy-decode-never-happen.log"


@pytest.mark.parametrize(
    "failure",
    [
        "Prefill out of memory. This should never happen.",
        "Decode out of memory. This should nerver happen.",  # 0.1.10 / 0.1.14's spelling
        "Prefill out of memory.",  # 0.1.5
    ],
)
def test_every_legacy_wording_is_the_logical_failure(run: Run, failure: str) -> None:
    lines = _lines(LEGACY)
    at = next(i for i, t in enumerate(lines) if "This should never happen" in t)
    d = run([*lines[:at], failure, *lines[at + 1 :]])
    assert _verdict(d) == ("not_oom", "logical-kv-slot-failure")
    assert "token estimate" in d.actions[0].text


def test_the_kill_after_the_tree_dump_is_not_the_hosts_oom_killer(run: Run) -> None:
    d = run(_lines(LEGACY))
    assert _verdict(d) == ("not_oom", "logical-kv-slot-failure")
    assert d.incident.primary is not None
    assert d.incident.primary.kind == "logical_kv_failure"
    assert any("Killed" in a.text for a in d.actions)


def test_todays_wording_keeps_todays_advice(run: Run) -> None:
    """0.2.12+'s `... Try to lower your batch size.` is the same family, without the legacy text."""
    lines = _lines(LEGACY)
    at = next(i for i, t in enumerate(lines) if "This should never happen" in t)
    d = run([*lines[:at], "Prefill out of memory. Try to lower your batch size."])
    assert _verdict(d) == ("not_oom", "logical-kv-slot-failure")
    assert "token estimate" not in d.actions[0].text
