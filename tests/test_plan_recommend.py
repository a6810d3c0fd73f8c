"""One recommendation for one budget: `diagnose` and `plan` give the same value, say why in one
sentence, and print windows as a reader should see them (never reversed, never above 1)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from oomdoctor.budget.recommend import recommend, window_text
from oomdoctor.cli import cli
from oomdoctor.model import SglangBudget, Window
from tests.conftest import FIXTURES

WORKED = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
L4_8B = ("--gpu", "L4", "--model", str(FIXTURES / "configs" / "meta-llama--Llama-3.1-8B-Instruct"))


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout


@pytest.mark.parametrize(
    ("low", "high", "today", "text"),
    [
        # the L4 case of issue 21: y_min 1.464 (weights + one 128K request > pre)
        (1.464, 0.684, 0.684, "needs ≥ 1.46: no fraction works (today 0.684)"),
        (0.885, 0.833, 0.70, "needs ≥ 0.885 and ≤ 0.833: no fraction works (today 0.700)"),
        (0.769, 0.874, 0.70, "0.769 – 0.874 (today 0.700: outside, below)"),
        (0.769, 0.874, 0.80, "0.769 – 0.874 (today 0.800: inside)"),
        (0.769, 0.874, 0.95, "0.769 – 0.874 (today 0.950: outside, above)"),
        (0.769, None, None, "≥ 0.769"),
        (None, None, 0.8, "unknown"),
    ],
)
def test_window_text(low: float | None, high: float | None, today: float | None, text: str) -> None:
    assert window_text(low, high, today) == text


def _budget(y: float, low: float, high: float) -> SglangBudget:
    # the DESIGN §2 worked example: pre 78, post 18 → y_zero = 1 − 18/78 = 0.76923
    return SglangBudget(
        pre_gib=78.0,
        post_gib=18.0,
        mem_fraction_static=y,
        y_zero=1 - 18 / 78,
        window=Window(low, "a KV pool that is not empty", high, "a runtime reserve"),
    )


def test_recommend_by_hand() -> None:
    raised = recommend(_budget(0.70, 1 - 18 / 78, 0.874))
    # round_up(0.76923 + 0.02) = round_up(0.78923) = 0.79; 0.02 × 78 = 1.56 GiB of margin
    assert (raised.value, raised.move) == (0.79, "raise")
    assert "1.56 GiB of KV pool" in raised.why and raised.why.count(". ") == 0
    lowered = recommend(_budget(0.95, 1 - 18 / 78, 0.874))
    # round_down(0.874) = 0.87; KV(0.87) = 18 − 0.13 × 78 = 7.86 GiB
    assert (lowered.value, lowered.move) == (0.87, "lower") and "7.86 GiB" in lowered.why
    kept = recommend(_budget(0.80, 1 - 18 / 78, 0.874))
    assert (kept.value, kept.move) == (None, "keep")
    # a window narrower than the margin: 0.79 > 0.78, so the next candidate
    # round_up(0.76923 + 0.005, 0.005) = round_up(0.77423, 0.005) = 0.775
    narrow = recommend(_budget(0.70, 1 - 18 / 78, 0.78))
    assert narrow.value == 0.775


def test_diagnose_and_plan_recommend_the_same_value_for_the_worked_example() -> None:
    _, out = _cli("diagnose", str(WORKED), "--format", "json", "--no-gpu")
    diagnosed = json.loads(out)
    action = next(a for a in diagnosed["actions"] if a["flag"] == "--mem-fraction-static")
    b = diagnosed["budget"]
    # the plan of the same numbers: pre 78, weights 78 − 18 = 60, y 0.70, the log's release
    code, out = _cli(
        "plan",
        "--pre-load-memory",
        f"{b['pre_gib']}GiB",
        "--weights",
        f"{b['weights_gib']}GiB",
        "--mem-fraction-static",
        str(b["mem_fraction_static"]),
        "--sglang-version",
        "0.5.2",
        "--format",
        "json",
    )
    planned = json.loads(out)
    assert code == 1 and planned["budget"]["y_max"] == pytest.approx(b["y_max"], abs=1e-4)
    assert action["value"] == planned["plan"]["recommended_mem_fraction_static"] == 0.79
    # The same sentence of why (the lower bound's wording differs: the log has no pool yet).
    same = "0.79 is the smallest raise that works: the least workable value 0.769 (a KV pool"
    assert planned["plan"]["why"].startswith(same) and same in action["text"]
    # And with plan's own default release the window's top moves, the value does not.
    _, out = _cli(
        "plan", "--pre-load-memory", "78GiB", "--weights", "60GiB", "--mem-fraction-static", "0.70"
    )
    assert "+ --mem-fraction-static 0.79" in out


def test_an_empty_window_is_said_not_reversed() -> None:
    code, out = _cli("plan", *L4_8B, "--context-length", "131072")
    assert code == 1
    assert "needs ≥ 1.46: no fraction works" in out
    assert "1.464 – 0.684" not in out and "(empty)" not in out
    _, out = _cli("diagnose", str(FIXTURES / "sglang-0.5.10" / "startup-kv-cotenant-notebook.log"))
    assert "– 0.747 (empty)" not in out and "0.810 – 0.747" not in out


def test_the_card_is_named_for_what_it_is() -> None:
    """pre 50.60 GiB with a co-tenant: 50.60 + 1.35 = 51.95 GiB is an estimate, not the card."""
    log = FIXTURES / "sglang-0.5.10" / "startup-kv-cotenant-notebook.log"
    _, out = _cli("diagnose", str(log), "--format", "json", "--no-gpu")
    basis = json.loads(out)["budget"]["y_max_basis"]
    assert "of the 51.95 GiB card" not in basis
    assert "51.95 GiB card (estimated as pre 50.60 + 1.35 GiB of CUDA context" in basis


def test_no_fraction_names_the_term_that_does_not_fit() -> None:
    """pre 21.14, post 6.18 (weights 14.96), one 128K request of 16.00 GiB:
    y_min = 1 − 6.18/21.14 + 16/21.14 = 0.7077 + 0.7569 = 1.4645 ≥ 1, even with no upper bound."""
    b = SglangBudget(
        pre_gib=21.14,
        post_gib=6.18,
        mem_fraction_static=0.684,
        y_zero=1 - 6.18 / 21.14,
        window=Window(
            1 - 6.18 / 21.14 + 16 / 21.14,
            "a KV pool for one request of the context length: 131072 tokens × 131072 B = 16.00 GiB",
        ),
    )
    r = recommend(b)
    assert (r.value, r.move) == (None, "none_works")
    assert r.why == (
        "No --mem-fraction-static works: the weights per GPU (14.96 GiB) plus a KV pool for one "
        "request of the context length (131072 tokens × 131072 B = 16.00 GiB) need 30.96 GiB, "
        "more than the 21.14 GiB free before loading."
    )
