"""Every fixture log with a sidecar `.expect.toml`: category, advice direction and the numbers a
human computed by hand from the log (see each sidecar's [calc])."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, SIDECARS, fixture_snapshots, load_toml, mem_fraction_directions
from tests.conftest import fixture_log as _log

TOLERANCE_GIB = 0.05


def _report(sidecar: Path, report_of: Callable[..., dict]) -> dict:
    return report_of(_log(sidecar), fixture_snapshots(sidecar))


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_category(sidecar: Path, report_of: Callable[[Path], dict]) -> None:
    expect = load_toml(sidecar)
    rep = _report(sidecar, report_of)
    assert rep["verdict"]["category"] == expect["category"], rep["verdict"]["summary"]


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_mem_fraction_direction(sidecar: Path, report_of: Callable[[Path], dict]) -> None:
    """Advice never moves --mem-fraction-static the wrong way; when a direction is expected, the
    first mem-fraction action takes it."""
    expect = load_toml(sidecar)
    rep = _report(sidecar, report_of)
    directions = mem_fraction_directions(rep)
    wanted = expect["direction"]
    if wanted == "raise":
        assert directions and directions[0] == "raise"
        assert "lower" not in directions
    elif wanted == "lower":
        assert directions and directions[0] == "lower"
        assert "raise" not in directions
    elif not expect.get("allow_raise"):
        assert "raise" not in directions, rep["actions"]


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_budget_numbers(sidecar: Path, report_of: Callable[[Path], dict]) -> None:
    expect = load_toml(sidecar)
    rep = _report(sidecar, report_of)
    budget = rep["budget"]
    for key, value in expect.get("budget", {}).items():
        got = budget[key]
        assert got is not None, f"{key}: expected {value}, oomdoctor says null"
        if key in ("kv_tokens", "bytes_per_token", "max_model_len", "engine", "stage"):
            assert got == value, key
        elif key in ("mem_fraction_static", "gpu_memory_utilization"):
            assert got == pytest.approx(value, abs=1e-6), key
        else:
            assert got == pytest.approx(value, abs=TOLERANCE_GIB), key
    if "tightest_rank" in expect:
        assert budget["rank"] == expect["tightest_rank"]
    stages = {r["stage"]: r for r in budget["ranks"] if r["stage"]}
    for name, wanted in expect.get("stages", {}).items():
        got_stage = stages.get(name)
        assert got_stage is not None, f"no budget for stage {name}: {sorted(stages)}"
        for key, value in wanted.items():
            if key == "gpu":
                assert got_stage[key] == value, (name, key)
            elif key == "kv_gib" and "kv_logged_gib" in wanted:  # KV as the log says it
                assert got_stage[key] == pytest.approx(wanted["kv_logged_gib"], abs=0.15), name
            else:
                assert got_stage[key] == pytest.approx(value, abs=TOLERANCE_GIB), (name, key)


@pytest.mark.parametrize(
    "sidecar",
    [s for s in SIDECARS if "oom" in load_toml(s)],
    ids=lambda p: str(p.relative_to(FIXTURES)),
)
def test_oom_numbers_and_holders(
    sidecar: Path, report_of: Callable[[Path], dict], diagnose: Callable[[Path], object]
) -> None:
    expect = load_toml(sidecar)["oom"]
    rep = _report(sidecar, report_of)
    oom = rep["failure"]["oom"]
    assert oom is not None
    for key in ("requested_gib", "free_gib", "total_gib", "this_process_gib"):
        if key in expect:
            assert oom[key] == pytest.approx(expect[key], abs=0.01), key
    diag = diagnose(_log(sidecar), fixture_snapshots(sidecar))
    assert diag.oom is not None
    holders = diag.oom.holders.holders
    foreign = sorted((h.pid, round(h.gib, 2)) for h in holders if h.role == "foreign")
    wanted = sorted((f["pid"], round(f["gib"], 2)) for f in expect.get("foreign", []))
    assert foreign == wanted


@pytest.mark.parametrize(
    "sidecar",
    [s for s in SIDECARS if "gpu" in load_toml(s)],
    ids=lambda p: str(p.relative_to(FIXTURES)),
)
def test_snapshot_cotenants(sidecar: Path, report_of: Callable[..., dict]) -> None:
    """The co-tenants the snapshot shows on the server's GPUs, with their sizes."""
    expect = load_toml(sidecar)["gpu"]
    gpu = _report(sidecar, report_of)["gpu"]
    assert gpu["available"]
    foreign = sorted(
        (p["pid"], round(p["used_gib"], 1)) for p in gpu["processes"] if p["role"] == "foreign"
    )
    wanted = sorted((f["pid"], round(f["gib"], 1)) for f in expect["foreign"])
    assert foreign == wanted


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_recommended_fraction_lies_in_the_window(
    sidecar: Path, report_of: Callable[..., dict]
) -> None:
    """Whenever the log gives the numbers, the window is reported and a recommended
    --mem-fraction-static lies inside it (an empty window is said to be empty)."""
    rep = _report(sidecar, report_of)
    b = rep["budget"]
    if b["engine"] == "vllm":
        _check_utilization_window(rep)
        return
    if b["pre_gib"] is None or b["post_gib"] is None or b["mem_fraction_static"] is None:
        return  # the log lacks the numbers: nothing to check
    assert b["y_min"] is not None and b["y_max"] is not None and b["window_empty"] is not None
    for action in rep["actions"]:
        flag = action["flag"] or ""
        if not flag.replace("_", "-").endswith("mem-fraction-static") or action["value"] is None:
            continue
        if b["window_empty"]:
            assert "No value of" in action["text"] or "fits both bounds" in action["text"]
        else:
            in_effect = action["value"] * b["fraction_factor"]  # what SGLang makes of the flag
            assert b["y_min"] - 1e-3 <= in_effect <= b["y_max"] + 1e-3, action["text"]


def _check_utilization_window(rep: dict) -> None:
    """vLLM: a recommended --gpu-memory-utilization lies in [u_min, u_max] when that is not empty."""
    b = rep["budget"]
    for action in rep["actions"]:
        if action["flag"] != "--gpu-memory-utilization" or action["value"] is None:
            continue
        if b["u_min"] is not None and b["u_max"] is not None and not b["window_empty"]:
            assert b["u_min"] - 1e-9 <= action["value"] <= b["u_max"] + 1e-9, action["text"]


_WITH_ENGINE = [s for s in SIDECARS if "engine" in load_toml(s)]


@pytest.mark.parametrize("sidecar", _WITH_ENGINE, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_engine_and_its_flags(sidecar: Path, report_of: Callable[[Path], dict]) -> None:
    """The engine is told from the excerpt itself, and the advice names only that engine's
    flags (never SGLang's for a vLLM log, or the reverse)."""
    from oomdoctor.advice.flags import foreign_flags
    from oomdoctor.knowledge import family

    expect = load_toml(sidecar)
    rep = _report(sidecar, report_of)
    assert rep["input"]["engine"] == expect["engine"], rep["input"]["engine_evidence"]
    engine_family = family(str(expect["engine"]))
    assert engine_family is not None
    for action in rep["actions"]:
        named = foreign_flags(engine_family, f"{action['flag'] or ''} {action['text']}")
        assert not named, f"{named} in advice for a {expect['engine']} log: {action['text']}"
