"""VLMs and SGLang Omni: the fraction SGLang really applied, the value to pass, sibling stages that
are never co-tenants, and advice aimed at the stage that fills the failing GPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import FIXTURES

VLM_046 = FIXTURES / "sglang-0.4.6" / "vlm-auto-reduce-image-oom.log"
VLM_0410 = FIXTURES / "sglang-0.4.10" / "vlm-video-oom.log"
VLM_0523 = FIXTURES / "sglang-0.5.23" / "vlm-post-sizing-reserve.log"
OMNI = FIXTURES / "omni-0.1.9"


def _first(rep: dict, suffix: str) -> dict:
    return next(a for a in rep["actions"] if (a["flag"] or "").endswith(suffix))


def test_046_multiplies_even_a_passed_value_so_advice_divides(
    report_of: Callable[..., dict],
) -> None:
    rep = report_of(VLM_046)
    b = rep["budget"]
    assert b["mem_fraction_static"] == 0.792 and b["fraction_factor"] == 0.9
    action = _first(rep, "--mem-fraction-static")
    assert action["direction"] == "lower" and action["current"] == 0.88  # what the user passed
    assert b["y_min"] <= action["value"] * 0.9 <= b["y_max"]
    assert "multiplies the flag by 0.9" in action["text"]


def test_the_factor_is_found_from_the_kv_line_when_the_adjustment_line_is_missing(
    report_of: Callable[..., dict], tmp_path: Path
) -> None:
    """An excerpt that starts after `Automatically reduce ...`: the KV line fits only 0.88 × 0.9."""
    lines = VLM_046.read_bytes().split(b"\n")
    cut = tmp_path / "excerpt.log"
    cut.write_bytes(b"\n".join(li for li in lines if b"Automatically reduce" not in li))
    b = report_of(cut)["budget"]
    assert b["mem_fraction_static"] == 0.792
    assert b["fraction_factor"] == 0.9 and "KV line" in b["mem_fraction_source"]


def test_0410_keeps_the_unrounded_value_it_printed(report_of: Callable[..., dict]) -> None:
    b = report_of(VLM_0410)["budget"]
    assert b["mem_fraction_static"] == 0.7835956249999999
    assert b["fraction_factor"] == 1.0  # 0.4.10 adjusts only its own default, not a passed value


def test_0523_multimodal_reserve_comes_out_of_the_kv_pool(report_of: Callable[..., dict]) -> None:
    rep = report_of(VLM_0523)
    assert any("multimodal allocations made after sizing" in n for n in rep["notices"])
    b = rep["budget"]
    plain = b["post_gib"] - (1 - b["mem_fraction_static"]) * b["pre_gib"]
    assert b["kv_gib"] < plain - 0.05


def test_sibling_stages_are_not_cotenants(report_of: Callable[..., dict]) -> None:
    rep = report_of(OMNI / "sibling-stage-holder.log")
    assert rep["verdict"]["category"] == "encoder_starvation"
    assert not any(f["rule"].endswith("foreign-holder") for f in rep["findings"])
    texts = " ".join(a["text"] for a in rep["actions"])
    assert "--thinker.factory.encoder_mem_reserve" in texts
    assert _first(rep, "mem_fraction_static")["flag"] == "--thinker.engine.mem_fraction_static"


def test_advice_targets_the_stage_that_fills_the_failing_gpu(
    report_of: Callable[..., dict],
) -> None:
    """Code2Wav fails on GPU 1, filled by the talker: the talker's fraction, not the thinker's."""
    rep = report_of(OMNI / "code2wav-oom.log")
    action = _first(rep, "mem_fraction_static")
    assert action["flag"] == "--talker_ar.engine.mem_fraction_static"
    assert action["direction"] == "lower" and action["value"] < action["current"]
    assert "thinker" not in action["text"]


def test_thinker_kv_rejection_raises_the_pool_by_the_missing_tokens(
    report_of: Callable[..., dict],
) -> None:
    rep = report_of(OMNI / "thinker-kv-reject.log")
    assert rep["verdict"]["category"] == "not_oom"
    action = _first(rep, "mem_fraction_static")
    b = rep["budget"]
    # 40168 − 36983 = 3185 tokens × 98304 B = 0.29 GiB; over pre, plus 0.01, rounded up.
    need = (40168 - 36983) * 98304 / 2**30
    assert action["direction"] == "raise"
    assert action["value"] >= b["mem_fraction_static"] + need / b["pre_gib"]


def test_colocated_budget_uses_omnis_formula(report_of: Callable[..., dict]) -> None:
    rep = report_of(OMNI / "colocated-no-headroom.log")
    assert rep["budget"]["kv_gib"] == -1.89
    action = _first(rep, "gpu_memory_fraction")
    assert action["flag"] == "--thinker.gpu_memory_fraction" and action["direction"] == "raise"
    assert action["value"] > 58.05 / 140.40
