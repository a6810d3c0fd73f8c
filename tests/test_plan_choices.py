"""`oomdoctor plan` as a user meets it: SGLang's default is fine, the smallest change that works,
levers whose commands work when run, exit codes, card names and checked options."""

from __future__ import annotations

import json
import shlex
from typing import Any

import click
import pytest
from click.testing import CliRunner

from oomdoctor.budget import cards, sglang_defaults
from oomdoctor.cli import cli
from tests.conftest import FIXTURES

CONFIGS = FIXTURES / "configs"


def run(*args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["plan", *args, "--format", "json"])
    data = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, data, result.stderr


def test_sglang_default_on_an_empty_h100_is_fine_and_unchanged() -> None:
    code, data, _ = run("--gpu", "H100-80G", "--weights", "16GiB")
    plan, b = data["plan"], data["budget"]
    assert code == 0 and plan["verdict"] == "fine" and plan["problems"] == []
    assert plan["recommended_mem_fraction_static"] is None
    assert b["mem_fraction_static"] == 0.83 and "--mem-fraction-static 0.83" in plan["command"]
    # hand calculation: pre = 81559/1024 − 1.35; KV = 0.83·pre − 16
    pre = 81559 / 1024 - 1.35
    assert b["kv_gib"] == pytest.approx(0.83 * pre - 16, abs=0.01)


@pytest.mark.parametrize("label", [c.label for c in cards.CARDS])
@pytest.mark.parametrize("version", ["0.3.6", "0.4.6", "0.5.2", "0.5.10", "0.5.23"])
def test_sglang_default_is_never_thin_headroom(label: str, version: str) -> None:
    """The default is SGLang's own (card − reserve)/card: it is the ceiling, never above it."""
    code, data, _ = run("--gpu", label, "--weights", "2GiB", "--sglang-version", version)
    assert code == 0 and data["plan"]["verdict"] == "fine", data["plan"]["summary"]


def test_worked_example_raises_to_the_smallest_value_that_starts() -> None:
    args = ("--pre-load-memory", "78GiB", "--weights", "60GiB")
    code, data, _ = run(*args, "--mem-fraction-static", "0.70")
    plan = data["plan"]
    assert code == 1 and plan["verdict"] == "will_not_start"
    # y_zero = 1 − 18/78 = 0.7692; the smallest raise keeps 0.02 of margin, rounded up: 0.79
    assert plan["recommended_mem_fraction_static"] == 0.79
    assert "--mem-fraction-static 0.79" in plan["command"]
    code, again, _ = run(*args, "--mem-fraction-static", "0.79")
    assert code == 0 and again["plan"]["verdict"] == "fine"


def test_a_fraction_that_works_is_kept() -> None:
    code, data, _ = run(
        "--pre-load-memory", "78GiB", "--weights", "60GiB", "--mem-fraction-static", "0.80"
    )
    assert code == 0 and data["plan"]["recommended_mem_fraction_static"] is None
    assert "--mem-fraction-static 0.80" in data["plan"]["command"]


def test_too_high_a_fraction_is_lowered_to_the_ceiling_not_the_middle() -> None:
    code, data, _ = run("--gpu", "H100-80G", "--weights", "16GiB", "--mem-fraction-static", "0.95")
    plan, b = data["plan"], data["budget"]
    assert code == 0 and plan["verdict"] == "thin_headroom"
    assert plan["recommended_mem_fraction_static"] == pytest.approx(
        int(b["y_max"] * 100) / 100, abs=1e-9
    )


def _replan(base: tuple[str, ...], command: str) -> tuple[int, dict[str, Any]]:
    """Run `plan` with the flags of a printed launch command, on the same card and model."""
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    flags = dict(zip(words[3::2], words[4::2], strict=True))
    args = list(base)
    for flag in (
        "--tp-size",
        "--mem-fraction-static",
        "--quantization",
        "--context-length",
        "--kv-cache-dtype",
        "--chunked-prefill-size",
    ):
        if flag in flags:
            args += [flag, flags[flag]]
    code, data, _ = run(*args)
    return code, data


SCENARIOS = [
    ("--gpu", "A100-40G", "--weights", "131GiB"),
    ("--gpu", "L4", "--model", str(CONFIGS / "meta-llama--Llama-3.1-8B-Instruct")),
    ("--gpu", "H100", "--model", str(CONFIGS / "Qwen--Qwen3-32B"), "--context-length", "32768"),
    ("--gpu", "A100-40G", "--model", str(CONFIGS / "meta-llama--Llama-3.1-70B-Instruct")),
]


@pytest.mark.parametrize("base", SCENARIOS, ids=lambda a: " ".join(a[:4]))
def test_no_printed_command_fails(base: tuple[str, ...]) -> None:
    code, data, _ = run(*base)
    plan = data["plan"]
    assert code == 1 and plan["levers"], plan["summary"]
    if plan["command"] is not None:
        assert _replan(base, plan["command"])[0] == 0
    for lever in plan["levers"]:
        code, again = _replan(base, lever["command"])
        assert code == 0 and again["plan"]["verdict"] == "fine", (lever, again["plan"]["summary"])


def test_seventy_b_on_a100_40g_offers_tp_and_fp8_by_hand() -> None:
    code, data, _ = run("--gpu", "A100-40G", "--weights", "131GiB")
    plan = data["plan"]
    assert code == 1 and plan["command"] is None and plan["recommended_mem_fraction_static"] is None
    levers = {lever["lever"]: lever for lever in plan["levers"]}
    assert "--tp-size 8" in levers["tp"]["command"]  # 131/4 = 32.75 GiB does not fit a 40 GiB card
    assert "16.38 GiB of weights per GPU" in levers["tp"]["text"]  # 131/8
    fp8 = levers["tp+fp8_weights"]
    assert "--quantization fp8" in fp8["command"] and "--tp-size 4" in fp8["command"]
    assert "18.01 GiB of weights per GPU" in fp8["text"]  # 131 × 0.55 / 4


def test_worst_problem_first() -> None:
    code, data, _ = run(
        "--gpu",
        "H100",
        "--model",
        str(CONFIGS / "Qwen--Qwen3-32B"),
        "--context-length",
        "32768",
        "--mem-fraction-static",
        "0.87",
    )
    plan = data["plan"]
    assert code == 1
    assert [p["kind"] for p in plan["problems"]] == ["context_does_not_fit", "thin_headroom"]
    assert plan["summary"].startswith("One request of the full context")
    assert "Also: Activation headroom is thin" in plan["summary"]


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("H100", "H100-80G"),
        ("h100-80g", "H100-80G"),
        ("NVIDIA H100 80GB HBM3", "H100-80G"),
        ("NVIDIA A100-SXM4-40GB", "A100-40G"),
        ("a100 80gb", "A100-80G"),
        ("Tesla T4", "T4"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_card_names_resolve(name: str, label: str) -> None:
    code, data, _ = run("--gpu", name, "--weights", "2GiB")
    assert code == 0 and data["plan"]["card"] == label


@pytest.mark.parametrize(
    ("name", "suggested"),
    [("A100", "A100-40G or A100-80G"), ("H1OO", "H100"), ("RTX4900", "RTX 4090")],
)
def test_unknown_card_names_get_the_nearest(name: str, suggested: str) -> None:
    code, _, err = run("--gpu", name, "--weights", "2GiB")
    assert code == 2 and "did you mean" in err.splitlines()[0] and suggested in err


GOOD = ("--gpu", "H100", "--weights", "2GiB")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((*GOOD, "--kv-cache-dtype", "bogus"), "--kv-cache-dtype"),
        ((*GOOD, "--quantization", "int3"), "--quantization"),
        ((*GOOD, "--sglang-version", "banana"), "not a version"),
        ((*GOOD, "--tp", "0"), "--tp"),
        (("--gpu-mem", "0", "--weights", "2GiB"), "not a size a GPU holds"),
        (("--pre-load-memory", "0", "--weights", "2GiB"), "not a size a GPU holds"),
        (("--gpu", "H100", "--weights", "10000TiB"), "not a size a GPU holds"),
    ],
)
def test_bad_options_are_refused(args: tuple[str, ...], message: str) -> None:
    code, _, err = run(*args)
    assert code == 2 and message in err and "Traceback" not in err


def test_every_option_has_help_and_the_help_cites_nothing_unshipped() -> None:
    command = cli.commands["plan"]
    missing = [
        p.name for p in command.params if isinstance(p, click.Option) and not (p.help or "").strip()
    ]
    assert missing == []
    text = CliRunner().invoke(cli, ["plan", "--help"]).stdout
    assert "DESIGN" not in text and "per GPU" not in text.split("--weights")[1].split("--")[0]
    assert "Exit status" in text


def test_fp8_kv_and_context_levers_by_hand() -> None:
    """8B at 128K on an L4: the shorter context is the longest multiple of 1024 that fits."""
    code, data, _ = run(
        "--gpu", "L4", "--model", str(CONFIGS / "meta-llama--Llama-3.1-8B-Instruct")
    )
    b = data["budget"]
    levers = {lever["lever"]: lever for lever in data["plan"]["levers"]}
    assert code == 1
    if "context" in levers:
        lever = levers["context"]
        assert lever["kv_tokens"] >= int(lever["command"].split("--context-length ")[1].split()[0])
    reserve = sglang_defaults.reserve(23034, {"tp_size": 1, "pp_size": 1}, "0.5.23")
    assert b["y_max"] == pytest.approx((23034 - reserve.mib) / 23034, abs=1e-4)
