"""`plan` for a VLM applies SGLang's multimodal adjustment (0.5.6 ServerArgs.
adjust_mem_fraction_for_vlm) and says what the encoder needs; the user's flags are kept or the
rename is said."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from oomdoctor.budget import multimodal
from oomdoctor.cli import cli
from tests.conftest import FIXTURES

VL = ("--gpu", "L40S", "--model", str(FIXTURES / "configs" / "Qwen--Qwen2.5-VL-7B-Instruct"))
TEXT = ("--gpu", "L40S", "--model", str(FIXTURES / "configs" / "meta-llama--Llama-3.1-8B-Instruct"))


def run(*args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["plan", *args, "--format", "json"])
    return result.exit_code, json.loads(result.stdout), result.stderr


@pytest.mark.parametrize(
    ("layers", "hidden", "factor"),
    [
        (24, 1024, 0.95),  # ViT-L/14 itself: 0.95 × 1
        (24, 1280, 0.95 * (1 - 0.1 * (1280**2 / 1024**2 - 1))),  # 0.95 × 0.94375 = 0.8966
        (48, 2048, 0.95 * 0.8),  # ratio 8: 1 − 0.7 clamped up to 0.8
        (6, 512, 0.95 * 1.05),  # ratio 1/16: 1.09375 clamped down to 1.05
    ],
)
def test_vit_factor_by_hand(layers: int, hidden: int, factor: float) -> None:
    assert multimodal.vit_factor(layers, hidden) == pytest.approx(factor)


def test_a_vlm_gets_a_lower_default_and_an_encoder_note() -> None:
    """L40S, 46068 MiB, SGLang 0.5.23: reserve 512 + 1.5·4096 + 1/8·1024 + 2·32 + 8·50 = 7248
    MiB -> default (46068 − 7248)/46068 = 0.843. Qwen2.5-VL's vision_config has depth 32 but no
    num_hidden_layers, so SGLang counts 24 layers of 1280: × 0.8966 -> 0.7558."""
    code, data, _ = run(*VL)
    b = data["budget"]
    assert code == 0 and b["mem_fraction_static"] == pytest.approx(0.843 * 0.8965625, abs=1e-4)
    assert "adjust_mem_fraction_for_vlm" in b["mem_fraction_source"]
    assert b["fraction_factor"] == pytest.approx(0.8965625)
    note = next(n for n in data["notices"] if "multimodal" in n)
    assert "encoder (24 layers × 1280 wide)" in note and "dynamic share" in note
    # The same card and a text model of similar size: no factor, no note.
    _, text, _ = run(*TEXT)
    assert text["budget"]["mem_fraction_static"] == 0.843
    assert not any("multimodal" in n for n in text["notices"])


def test_a_vlm_fraction_the_user_gives_is_kept_and_the_note_says_so() -> None:
    code, data, _ = run(*VL, "--mem-fraction-static", "0.80")
    assert code == 0 and data["budget"]["mem_fraction_static"] == 0.80  # ≤ the 0.843 ceiling
    assert "--mem-fraction-static 0.80" in (data["plan"]["command"] or "")
    note = next(n for n in data["notices"] if "multimodal" in n)
    assert "not a value passed with --mem-fraction-static" in note


@pytest.mark.parametrize(
    ("flag", "version", "printed", "renamed"),
    [
        ("--cuda-graph-max-bs", "0.5.23", "--cuda-graph-max-bs-decode 64", True),
        ("--cuda-graph-max-bs-decode", "0.5.23", "--cuda-graph-max-bs-decode 64", False),
        ("--cuda-graph-max-bs", "0.5.10", "--cuda-graph-max-bs 64", False),
        ("--cuda-graph-max-bs-decode", "0.5.10", "--cuda-graph-max-bs 64", True),
    ],
)
def test_the_graph_flag_is_kept_or_the_rename_is_said(
    flag: str, version: str, printed: str, renamed: bool
) -> None:
    code, data, _ = run(
        "--gpu", "H100", "--weights", "16GiB", flag, "64", "--sglang-version", version
    )
    assert code == 0 and data["plan"]["command"].endswith(printed)
    said = [n for n in data["notices"] if "is written" in n]
    assert bool(said) is renamed
    if renamed:
        assert said[0].startswith(f"{flag} 64 is written {printed.rsplit(' ', 1)[0]} 64")


def test_both_graph_flags_are_refused() -> None:
    code = CliRunner().invoke(
        cli,
        [
            "plan",
            "--gpu",
            "H100",
            "--weights",
            "16GiB",
            "--cuda-graph-max-bs",
            "8",
            "--cuda-graph-max-bs-decode",
            "8",
        ],
    )
    assert code.exit_code == 2 and "same setting" in code.stderr
