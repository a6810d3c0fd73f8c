"""`plan` searches combinations: the smallest set of changes on the user's cards before more
cards, the longest context that fits, and every printed launch re-planned as fine."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES

CONFIGS = FIXTURES / "configs"
L4_8B = ("--gpu", "L4", "--model", str(CONFIGS / "meta-llama--Llama-3.1-8B-Instruct"))
#: The flags a printed launch may carry that `plan` reads back.
REPLANNED = (
    "--tp-size",
    "--pp-size",
    "--mem-fraction-static",
    "--quantization",
    "--context-length",
    "--kv-cache-dtype",
    "--chunked-prefill-size",
)


def run(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["plan", *args, "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


def replan(base: tuple[str, ...], command: str) -> tuple[int, dict[str, Any]]:
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    flags = dict(zip(words[3::2], words[4::2], strict=True))
    args = [*base]
    for flag in REPLANNED:
        if flag in flags:
            args += [flag, flags[flag]]
    return run(*args)


def test_8b_on_one_l4_gets_a_single_l4_launch_first() -> None:
    """Hand calculation, SGLang 0.5.23 on an L4 (memory.total 23034 MiB):
    pre = 23034/1024 − 1.35 = 21.144 GiB; weights 16,060,522,496 B (safetensors index) =
    14.957 GiB; post = 6.187 GiB. 128K × 131,072 B = 16 GiB of KV: y_min = 1.46, nothing works.
    --chunked-prefill-size 2048: reserve 512 + 1.5·2048 + 1/8·1024 + 2·48 (decode graphs) +
    8·42 (prefill graph shapes up to 2048) = 4144 MiB -> SGLang's default y = (23034 − 4144) /
    23034 = 0.820; KV = 6.187 − 0.18·21.144 = 2.381 GiB = 2.381·8192 ≈ 19,500 tokens ->
    the longest context in 1024-token steps is 19·1024 = 19456."""
    code, data = run(*L4_8B)
    plan = data["plan"]
    assert code == 1 and plan["recommended_mem_fraction_static"] is None
    first = plan["levers"][0]
    assert first["lever"] == "context+chunked_prefill"
    assert "--tp-size" not in first["command"]
    assert "--chunked-prefill-size 2048" in first["command"]
    assert "--context-length 19456" in first["command"]
    assert first["mem_fraction_static"] == 0.82
    assert first["kv_gib"] == pytest.approx(2.381, abs=0.005)
    code, again = replan(L4_8B, first["command"])
    assert code == 0 and again["plan"]["verdict"] == "fine"
    # More cards come after every single-card launch.
    kinds = [lever["lever"] for lever in plan["levers"]]
    same = [k for k in kinds if "tp" not in k.split("+")]
    assert kinds[: len(same)] == same and len(same) < len(kinds)


def test_the_why_names_the_term_that_does_not_fit() -> None:
    # weights 14.96 + one 131072-token request (131072 × 131072 B = 16.00 GiB) = 30.96 GiB
    _, data = run(*L4_8B)
    why = data["plan"]["why"]
    assert "14.96 GiB" in why and "16.00 GiB" in why and "30.96 GiB" in why
    assert "21.14 GiB free before loading" in why
    assert "the weights per GPU (14.96 GiB) need more than" not in why


def test_every_set_offered_is_the_smallest() -> None:
    """No set of changes on today's cards holds a smaller one that was also offered."""
    _, data = run(*L4_8B)
    names = [lever["lever"] for lever in data["plan"]["levers"]]
    sets = [set(n.split("+")) for n in names if "tp" not in n.split("+")]
    assert len(sets) == 2  # context with a smaller chunk, context with FP8 weights
    for i, a in enumerate(sets):
        assert not any(b < a for j, b in enumerate(sets) if j != i), sets


def test_a_context_that_alone_is_too_long_is_shortened_to_the_longest_that_fits() -> None:
    """8B at 128K on an H100: weights fit, one full request does not.
    pre = 81559/1024 − 1.35 = 78.297; post = 78.297 − 14.957 = 63.340 GiB; 0.5.23 default
    y = 0.830 -> KV = 63.340 − 0.17·78.297 = 50.03 GiB = 409,843 tokens: 128K fits. At 1M
    tokens (Qwen2.5-7B-1M is another model; here --context-length 1048576) it does not."""
    base = (*L4_8B[:1], "H100", *L4_8B[2:], "--context-length", "1048576")
    code, data = run(*base)
    assert code == 1
    levers = {lever["lever"]: lever for lever in data["plan"]["levers"]}
    assert "context" in levers and "fp8_kv" not in levers  # 409K × 2 < 1M: FP8 KV alone fails
    longest = int(levers["context"]["command"].split("--context-length ")[1].split()[0])
    assert longest % 1024 == 0 and longest <= levers["context"]["kv_tokens"] < longest + 1024
    assert replan(base, levers["context"]["command"])[0] == 0


def test_tp16_says_it_needs_two_nodes() -> None:
    """DeepSeek-V3 (FP8 checkpoint, 626.67 GiB) on H100s: TP8 holds 78.3 GiB per GPU, more
    than pre (78.30 GiB) allows with a pool; TP16 holds 39.17."""
    base = ("--gpu", "H100", "--model", str(CONFIGS / "deepseek-ai--DeepSeek-V3"))
    code, data = run(*base, "--context-length", "32768")
    tp = next(lever for lever in data["plan"]["levers"] if lever["lever"] == "tp")
    assert code == 1 and "--tp-size 16" in tp["command"] and "--nnodes 2" in tp["command"]
    assert "2 nodes of 8" in tp["text"]


@pytest.mark.parametrize(
    ("size", "gib"),
    [
        ("141GB", 141e9 / 2**30),  # decimal, as Hugging Face and data sheets: 131.32 GiB
        ("141GiB", 141.0),
        ("141", 141.0),  # no unit: GiB
        ("16060522496B", None),  # bytes are not a unit it reads
        ("81559MiB", 81559 / 1024),
        ("80000MB", 80000e6 / 2**30),
    ],
)
def test_gb_is_decimal_and_gib_binary(size: str, gib: float | None) -> None:
    result = CliRunner().invoke(
        cli, ["plan", "--pre-load-memory", "200GiB", "--weights", size, "--format", "json"]
    )
    if gib is None:
        assert result.exit_code == 2 and "cannot read" in result.stderr
        return
    assert json.loads(result.stdout)["budget"]["weights_gib"] == pytest.approx(
        gib, abs=0.005
    )  # JSON: 2 decimals


def test_help_says_what_gb_means() -> None:
    text = " ".join(CliRunner().invoke(cli, ["plan", "--help"]).stdout.split())
    assert "GB, MB and TB are decimal (10⁹ bytes" in text and "GiB, MiB and TiB binary" in text


def test_pipeline_stages_hold_the_kv_of_their_own_layers() -> None:
    """Llama-3.1-70B: 8 KV heads × (128 + 128) × 80 layers × 2 B = 327,680 B per token at TP1;
    with --pp 2 each stage holds 40 layers: 163,840 B."""
    base = ("--gpu", "H200", "--model", str(CONFIGS / "meta-llama--Llama-3.1-70B-Instruct"))
    _, one = run(*base, "--context-length", "8192")
    _, two = run(*base, "--context-length", "8192", "--pp", "2")
    assert one["budget"]["bytes_per_token"] == 327680
    assert two["budget"]["bytes_per_token"] == 163840


def test_the_diff_shows_the_fraction_as_passed() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "plan",
            "--pre-load-memory",
            "78GiB",
            "--weights",
            "60GiB",
            "--mem-fraction-static",
            "0.7",
        ],
    )
    assert "- --mem-fraction-static 0.70\n" in result.stdout
    assert "+ --mem-fraction-static 0.79\n" in result.stdout


MATRIX = [
    ("--gpu", "L4", "--model", str(CONFIGS / "Qwen--Qwen2.5-7B-Instruct-1M")),  # a PP lever
    ("--gpu", "RTX 3090", "--model", str(CONFIGS / "deepseek-ai--DeepSeek-V2-Lite-Chat")),
    ("--gpu", "RTX 3090", "--model", str(CONFIGS / "Qwen--Qwen2.5-VL-7B-Instruct")),
    ("--gpu", "H100", "--model", str(CONFIGS / "mistralai--Mixtral-8x7B-Instruct-v0.1")),
    ("--gpu", "H100", "--model", str(CONFIGS / "meta-llama--Llama-3.1-70B-Instruct")),
    ("--gpu", "V100-16G", "--model", str(CONFIGS / "meta-llama--Llama-3.1-8B-Instruct")),
]


@pytest.mark.parametrize("base", MATRIX, ids=lambda a: f"{a[3].rsplit('/', 1)[-1]} on {a[1]}")
def test_every_printed_launch_replans_as_fine(base: tuple[str, ...]) -> None:
    code, data = run(*base)
    plan = data["plan"]
    assert code == 1 and plan["levers"], plan["summary"]
    for lever in plan["levers"]:
        again_code, again = replan(base, lever["command"])
        assert again_code == 0 and again["plan"]["verdict"] == "fine", (lever, again["plan"])
