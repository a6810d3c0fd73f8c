"""Every fixture log with a sidecar `.expect.toml`: category, advice direction and the numbers a
human computed by hand from the log (see each sidecar's [calc])."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.report.render import render
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
    elif expect.get("allow_raise"):  # growing the pool is an option, shrinking it is not
        assert "lower" not in directions, rep["actions"]
    else:
        assert "raise" not in directions, rep["actions"]


#: The sidecars that state budget figures (a fixture without any is checked by the window test).
_WITH_BUDGET = [s for s in SIDECARS if {"budget", "tightest_rank", "stages"} & set(load_toml(s))]


@pytest.mark.parametrize("sidecar", _WITH_BUDGET, ids=lambda p: str(p.relative_to(FIXTURES)))
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


#: Where a budget input comes from: the sidecar's hand-checked [budget] (or [oom]) table, or,
#: where the sidecar is silent, the report's own figure when the log prints it.
Inputs = dict[str, float | None]


def _inputs(sidecar: Path, rep: dict[str, Any], keys: dict[str, tuple[str, ...]]) -> Inputs:
    """Each window input the log gives: the sidecar's value, or where the sidecar is silent the
    report's when the log prints that figure (None: the log does not give it)."""
    expect = load_toml(sidecar)
    tables: list[dict[str, Any]] = [expect.get("budget", {}), expect.get("oom", {})]  # type: ignore[list-item]
    text = _log(sidecar).read_text("utf-8", errors="replace")
    out: Inputs = {}
    for name, sidecar_keys in keys.items():
        hand = next((t[k] for k in sidecar_keys for t in tables if k in t), None)
        got = rep["budget"][name]
        if hand is not None:
            out[name] = float(hand)
        elif got is not None and any(f in text for f in {f"{got:.2f}", f"{got:g}", f"{got}"}):
            out[name] = float(got)
        else:
            out[name] = None
    return out


def _fraction_actions(rep: dict[str, Any], suffixes: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        a for a in rep["actions"] if a["flag"] and a["flag"].replace("_", "-").endswith(suffixes)
    ]


def _no_value_without_basis(actions: list[dict[str, Any]], high: float | None) -> None:
    """Without a window, a recommended value rests on a stated basis, or on the one bound known."""
    for a in actions:
        if a["value"] is None:
            continue
        if high is not None:
            assert a["value"] <= high + 1e-9, f"above the upper bound {high}: {a['text']}"
        else:
            assert a["basis"], f"a value without a basis and without a window: {a['text']}"


def _window_shown(text: str, low: float | None, high: float | None, name: str) -> None:
    """The window row as budget/recommend.py words it: ``low – high`` when it holds values, an
    empty one said as ``needs ≥ low and ≤ high`` (``needs ≥ low`` above 1), never reversed."""
    flat = " ".join(text.split())
    label = f"window {name}_min – {name}_max "
    row = re.search(rf"{label}(\S+) – (\S+)", flat)
    if low is not None and high is not None and low > high:
        said = f"needs ≥ {low:.2f}" if low >= 1 else f"needs ≥ {low:.3f} and ≤ {high:.3f}"
        assert f"{label}{said}: no fraction works" in flat, flat[-2000:]
        assert row is None, row.group(0)
    elif low is not None and high is not None:
        assert row and row.groups() == (f"{low:.3f}", f"{high:.3f}"), flat[-2000:]
    else:  # an unknown end: no window row with numbers
        assert row is None or "unknown" in row.groups(), row and row.group(0)


def _check_sglang_window(sidecar: Path, rep: dict[str, Any]) -> str:
    b = rep["budget"]
    given = _inputs(
        sidecar,
        rep,
        {
            "pre_gib": ("pre_gib",),
            "post_gib": ("post_gib",),
            "mem_fraction_static": ("mem_fraction_static",),
        },
    )
    pre, post, y = given["pre_gib"], given["post_gib"], given["mem_fraction_static"]
    actions = _fraction_actions(rep, ("mem-fraction-static",))
    _window_shown(render(rep, "text"), b["y_min"], b["y_max"], "y")
    if pre is None or post is None or y is None:
        if pre is None or post is None:
            assert b["y_min"] is None and b["y_min_basis"] is None, "y_min without pre and post"
        if pre is None:
            assert b["y_max"] is None and b["y_max_basis"] is None, "y_max without pre"
        if b["y_min"] is None or b["y_max"] is None:
            assert b["window_empty"] is None, "an empty/full window with an end unknown"
        _no_value_without_basis(
            _fraction_actions(rep, ("mem-fraction-static", "gpu-memory-fraction")), None
        )
        return "sglang: not given"
    assert b["y_min"] is not None and b["y_max"] is not None, "pre, post and y give a window"
    assert b["y_min_basis"] and b["y_max_basis"], "each bound says why"
    y_zero = 1 - post / pre  # KV = post − (1 − y)·pre is 0 there (DESIGN §2)
    assert b["y_min"] >= y_zero - 2e-3, f"y_min {b['y_min']} below the empty pool's {y_zero:.4f}"
    assert 0 < b["y_max"] <= 1, b["y_max"]
    assert b["window_empty"] == (b["y_min"] > b["y_max"])
    for action in actions:
        assert action["value"] is not None, f"the window is known, the value is not: {action}"
        if b["window_empty"]:
            assert "No value of" in action["text"] or "fits both bounds" in action["text"]
        else:
            in_effect = action["value"] * b["fraction_factor"]  # what SGLang makes of the flag
            assert b["y_min"] - 1e-3 <= in_effect <= b["y_max"] + 1e-3, action["text"]
    return "sglang: window"


def _check_utilization_window(sidecar: Path, rep: dict[str, Any]) -> str:
    """vLLM: u_min needs u, the card's total and the KV cache; u_max needs the total."""
    b = rep["budget"]
    given = _inputs(
        sidecar,
        rep,
        {
            "gpu_memory_utilization": ("gpu_memory_utilization",),
            "capacity_gib": ("capacity_gib", "total_gib"),
            "kv_gib": ("kv_gib",),
        },
    )
    u, total, kv = given["gpu_memory_utilization"], given["capacity_gib"], given["kv_gib"]
    actions = _fraction_actions(rep, ("gpu-memory-utilization",))
    _window_shown(render(rep, "text"), b["u_min"], b["u_max"], "u")
    if total is None:
        assert b["u_max"] is None and b["u_max_basis"] is None, "u_max without the card's total"
    if u is None or total is None or kv is None:
        assert b["u_min"] is None and b["u_min_basis"] is None, "u_min without u, total and KV"
        assert b["window_empty"] is None, "an empty/full window with an end unknown"
        _no_value_without_basis(actions, b["u_max"])
        return "vllm: not given"
    assert b["u_min"] is not None and b["u_max"] is not None, "u, total and KV give a window"
    assert b["u_min_basis"] and b["u_max_basis"], "each bound says why"
    u_zero = u - kv / total  # the u at which the KV cache is empty
    assert b["u_min"] >= u_zero - 2e-3, f"u_min {b['u_min']} below the empty cache's {u_zero:.4f}"
    assert 0 < b["u_max"] <= 1, b["u_max"]
    assert b["window_empty"] == (b["u_min"] > b["u_max"])
    for action in actions:
        if action["value"] is not None and not b["window_empty"]:
            assert b["u_min"] - 1e-9 <= action["value"] <= b["u_max"] + 1e-9, action["text"]
    return "vllm: window"


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_recommended_fraction_lies_in_the_window(
    sidecar: Path, report_of: Callable[..., dict]
) -> None:
    """Where the log gives the window's inputs (per the sidecar), the window is reported, each
    bound says why, and a recommended fraction lies inside it (an empty window is said to be
    empty). Where it does not, the report invents neither a bound nor a value: the bounds are
    null, the window is shown as unknown, and a recommended value rests on a stated basis."""
    rep = _report(sidecar, report_of)
    if rep["budget"]["engine"] == "vllm":
        _check_utilization_window(sidecar, rep)
    else:
        _check_sglang_window(sidecar, rep)


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
