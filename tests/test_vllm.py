"""vLLM logs: the budget in vLLM's terms (u of TOTAL memory), advice in vLLM's flags, the engine
told apart from SGLang and overridable. Fixtures: fixtures/vllm-*/ (their sidecars hold the hand
calculations; these tests check what the sidecars cannot express)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES

V0_NO_KV = FIXTURES / "vllm-0.7.3" / "startup-no-kv-blocks.log"
V1_MAX_LEN = FIXTURES / "vllm-0.10.1" / "startup-max-seq-len.log"
V1_RUNTIME = FIXTURES / "vllm-0.10.1" / "runtime-forward-oom.log"
L40S_SNAPSHOT = FIXTURES / "vllm-0.10.1" / "startup-free-memory-cotenant.smi.xml"


def _flags(rep: dict) -> dict[str, dict]:
    return {a["flag"]: a for a in rep["actions"] if a["flag"]}


def test_no_kv_cache_raises_utilization_into_the_window(report_of: Callable[..., dict]) -> None:
    rep = report_of(V0_NO_KV)
    b = rep["budget"]
    assert (b["engine"], b["gpu_memory_utilization"], b["kv_gib"]) == ("vllm", 0.85, -0.94)
    # Bytes per token come from the CPU swap pool: floor(4 GiB / (16 × bpt)) = 1638 blocks.
    assert b["bytes_per_token"] == 163840
    # u_min: KV reaches one 8192-token request (1.25 GiB) at 0.85 + (0.94 + 1.25)/79.15 = 0.8777.
    assert b["u_min"] == 0.88
    action = _flags(rep)["--gpu-memory-utilization"]
    assert action["direction"] == "raise" and b["u_min"] <= action["value"] <= b["u_max"]
    assert "--mem-fraction-static" not in json.dumps(rep["actions"])


def test_runtime_oom_lowers_utilization_by_the_shortfall(report_of: Callable[..., dict]) -> None:
    rep = report_of(V1_RUNTIME)
    b = rep["budget"]
    oom = rep["failure"]["oom"]
    action = _flags(rep)["--gpu-memory-utilization"]
    short = oom["requested_gib"] - oom["free_gib"]
    expected = int((0.95 - (short + 1.0) / b["capacity_gib"]) * 100) / 100
    assert action["direction"] == "lower" and action["value"] == expected
    assert "--max-num-batched-tokens" in _flags(rep)


def test_a_snapshot_supplies_the_total_that_v1_does_not_print(
    report_of: Callable[..., dict],
) -> None:
    without = report_of(V1_MAX_LEN)
    assert without["budget"]["capacity_gib"] is None
    withsnap = report_of(V1_MAX_LEN, (L40S_SNAPSHOT,))
    b = withsnap["budget"]
    assert b["capacity_gib"] == 44.42  # NVML total minus the driver's reservation
    # 24 GiB for one 131072-token request cannot come from u: the window is empty, and the advice
    # says so and caps max_model_len at vLLM's own estimate.
    assert b["window_empty"] is True
    assert _flags(withsnap)["--max-model-len"]["value"] == 61792


def test_engine_override_and_notice() -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli, ["diagnose", "--no-gpu", "--format", "json", "--engine", "sglang", str(V0_NO_KV)]
    )
    rep = json.loads(result.output)
    assert rep["input"]["engine"] == "sglang"
    assert any("--engine" in n for n in rep["notices"])
    auto = json.loads(
        runner.invoke(cli, ["diagnose", "--no-gpu", "--format", "json", str(V0_NO_KV)]).output
    )
    assert auto["input"]["engine"] == "vllm"


def test_traceback_code_lines_are_not_messages(report_of: Callable[..., dict]) -> None:
    """`raise ValueError("No available memory ...")` is source code printed under a frame; the
    failure is the exception line after it."""
    rep = report_of(V0_NO_KV)
    text = Path(V0_NO_KV).read_bytes().decode("utf-8", "replace").split("\n")  # not \r
    line = text[rep["failure"]["where"]["line"] - 1]
    assert "ValueError: No available memory" in line


def test_sglang_rules_with_sglang_wording_stay_silent_on_vllm(
    report_of: Callable[..., dict],
) -> None:
    for log in sorted(FIXTURES.glob("vllm-*/*.log")):
        rep = report_of(log)
        fired = {f["rule"] for f in rep["findings"]}
        # encoder-oom is engine-neutral (its text names both engines' levers)
        assert not fired & {"startup-kv-no-room", "runtime-activation-oom"}, log


def test_a_failure_keeps_the_frames_of_its_traceback(report_of: Callable[..., dict]) -> None:
    rep = report_of(V0_NO_KV)
    frames = rep["failure"]["frames"]
    assert any("initialize_cache" in str(f) for f in frames), frames
