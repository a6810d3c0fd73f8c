"""Bytes per token and weights from Hugging Face configs, checked against what SGLang logged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from oomdoctor.budget import model_config
from tests.conftest import FIXTURES

CONFIGS = FIXTURES / "configs"


def _logs_with_a_kv_line_and_a_config() -> list[tuple[Path, Path]]:
    out = []
    for log in sorted(FIXTURES.rglob("*.log")):
        text = log.read_text("utf-8", "replace")
        if "KV Cache is allocated" not in text:
            continue
        for config in CONFIGS.iterdir():
            org, name = config.name.split("--", 1)
            if f"{org}/{name}'" in text or f"/{name}'" in text:
                out.append((log, config))
                break
    return out


CASES = _logs_with_a_kv_line_and_a_config()


def test_the_fixtures_cover_gqa_and_mla() -> None:
    kinds = {model_config.load(c).mla_dims is not None for _, c in CASES}
    assert kinds == {True, False}, [c.name for _, c in CASES]


@pytest.mark.parametrize(("log", "config"), CASES, ids=lambda p: p.name)
def test_bytes_per_token_match_sglangs_log(
    log: Path, config: Path, report_of: Callable[..., dict]
) -> None:
    rep = report_of(log)
    logged = rep["budget"]["bytes_per_token"]
    tp = rep["server_args"].get("tp_size", 1)
    kv_dtype = rep["server_args"].get("kv_cache_dtype", "auto")
    assert logged is not None
    assert model_config.load(config).bytes_per_token(tp, kv_dtype) == logged


@pytest.mark.parametrize(
    ("name", "params_b"),
    [
        ("meta-llama--Llama-3.1-8B-Instruct", 8.03),
        ("meta-llama--Llama-3.1-70B-Instruct", 70.55),
        ("Qwen--Qwen2.5-32B-Instruct", 32.76),
        ("mistralai--Mixtral-8x7B-Instruct-v0.1", 46.70),
        ("deepseek-ai--DeepSeek-V3", 671.0),
        ("Qwen--Qwen3-30B-A3B", 30.53),
    ],
)
def test_parameter_counts(name: str, params_b: float) -> None:
    shape = model_config.load(CONFIGS / name / "config.json")
    assert shape.params / 1e9 == pytest.approx(params_b, rel=0.02)


def test_weights_come_from_the_index_when_present() -> None:
    shape = model_config.load(CONFIGS / "meta-llama--Llama-3.1-8B-Instruct")
    index = json.loads(
        (CONFIGS / "meta-llama--Llama-3.1-8B-Instruct" / "model.safetensors.index.json").read_text()
    )
    assert shape.weights_from == "safetensors index"
    assert shape.weight_bytes == index["metadata"]["total_size"]
    assert shape.weights_gib_per_gpu(tp=2) == pytest.approx(
        index["metadata"]["total_size"] / 2 / 2**30
    )


def test_layouts() -> None:
    v3 = model_config.load(CONFIGS / "deepseek-ai--DeepSeek-V3")
    assert v3.mla_dims == 576 and v3.bytes_per_token(tp=8) == 70272  # MLA is not split by TP
    assert v3.bytes_per_token(kv_dtype="fp8_e4m3") == 35136
    assert v3.quantization == "fp8"
    llama70 = model_config.load(CONFIGS / "meta-llama--Llama-3.1-70B-Instruct")
    assert [llama70.bytes_per_token(tp) for tp in (1, 2, 4, 8, 16)] == [
        327680,
        163840,
        81920,
        40960,
        40960,
    ]
    nxt = model_config.load(CONFIGS / "Qwen--Qwen3-Next-80B-A3B-Instruct")
    assert nxt.full_attention_layers == 12 and nxt.linear_layers == 36
    vl = model_config.load(CONFIGS / "Qwen--Qwen2.5-VL-7B-Instruct")
    assert vl.bytes_per_token() == 57344


def test_plan_with_a_model_directory() -> None:
    from click.testing import CliRunner

    from oomdoctor.cli import cli

    out = (
        CliRunner()
        .invoke(
            cli,
            [
                "plan",
                "--gpu",
                "H100-80G",
                "--model",
                str(CONFIGS / "meta-llama--Llama-3.1-70B-Instruct"),
                "--tp",
                "4",
                "--context-length",
                "32768",
                "--format",
                "json",
            ],
        )
        .stdout
    )
    data = json.loads(out)
    assert data["budget"]["bytes_per_token"] == 81920
    assert data["budget"]["weights_gib"] == pytest.approx(141107412992 / 4 / 2**30, abs=0.01)
    assert data["plan"]["verdict"] in ("fine", "thin_headroom")


@pytest.mark.parametrize("content", ["not json", "[]", '{"model_type": "llama"}'])
def test_bad_configs_say_why(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(content)
    with pytest.raises(model_config.ConfigError):
        model_config.load(bad)
