"""One recommended --mem-fraction-static for one budget, shared by `diagnose` and `plan`.

The rule is the smallest change that works:
- inside the window, keep today's value;
- below it, raise to the least workable value plus RAISE_MARGIN, rounded up to a value to pass
  (and at least the value SGLang's own error message suggests);
- above it, lower to the window's upper bound, rounded down.

A raise depends on the lower bound only, which comes from measured (or, in `plan`, computed)
memory; the upper bound is SGLang's reserve estimate and changes between releases, so it only
caps the value. That is why `diagnose` on a log and `plan` with the log's numbers agree.

It also words the window the same way everywhere (`window_text`): an empty window is said as
"needs ≥ 1.46: no fraction works", never printed as a reversed range.
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.budget.formulas import kv_at, round_down, round_up
from oomdoctor.budget.targets import RAISE_MARGIN
from oomdoctor.model import SglangBudget

FLAG = "--mem-fraction-static"


class Recommendation(NamedTuple):
    #: the value to pass; None when today's value is kept, no fraction works, or it is unknown
    value: float | None
    move: str  # "keep", "raise", "lower", "none_works", "unknown"
    why: str  # one sentence


def fmt_y(y: float) -> str:
    """A fraction as it is passed: two decimals when that is exact, else three."""
    return f"{y:.2f}" if round(y, 2) == round(y, 4) else f"{y:.3f}"


def raise_candidates(low: float, suggested: float | None = None) -> list[float]:
    """Values to try when raising, preferred first: low + margin, then ever closer to low."""
    first = round_up(low + RAISE_MARGIN)
    if suggested is not None:
        first = max(first, round_up(suggested + 0.005))
    return [first, round_up(low + 0.005, 0.005), round_up(low, 0.001)]


def lower_candidates(high: float) -> list[float]:
    """Values to try when lowering, preferred first: the upper bound rounded down ever finer."""
    return [round_down(high), round_down(high, 0.005), round_down(high, 0.001)]


def placement(low: float | None, high: float | None, y: float | None) -> str | None:
    """Where today's value lies: "inside", "below", "above" (None: unknown)."""
    if y is None or (low is None and high is None):
        return None
    if low is not None and y <= low:
        return "below"
    if high is not None and round(y, 3) > round(high, 3):
        return "above"
    if low is not None and high is not None and low > high:
        return "below"  # an empty window: y ≤ high < low
    return "inside"


def window_text(low: float | None, high: float | None, today: float | None = None) -> str:
    """The window as a reader should see it, with today's value marked inside or outside."""
    if low is None and high is None:
        return "unknown"
    if low is not None and low >= 1:
        body = f"needs ≥ {low:.2f}: no fraction works"
    elif low is not None and high is not None and low > high:
        body = f"needs ≥ {low:.3f} and ≤ {high:.3f}: no fraction works"
    elif low is not None and high is not None:
        body = f"{low:.3f} – {high:.3f}"
    elif low is not None:
        body = f"≥ {low:.3f}"
    else:
        body = f"≤ {high:.3f}"
    where = placement(low, high, today)
    if today is None or where is None:
        return body
    if "no fraction works" in body:
        return f"{body} (today {today:.3f})"
    side = "inside" if where == "inside" else f"outside, {where}"
    return f"{body} (today {today:.3f}: {side})"


def no_fit_reason(b: SglangBudget) -> str | None:
    """Which term does not fit when no fraction works, with its size (None: one works)."""
    pre, post, low, high = b.pre_gib, b.post_gib, b.window.low, b.window.high
    if pre is None or post is None or low is None:
        return None
    weights = pre - post
    if post <= 0:
        return (
            f"the weights per GPU ({weights:.2f} GiB) alone are more than the {pre:.2f} GiB "
            "free before loading"
        )
    zero = b.y_zero if b.y_zero is not None else 1 - post / pre
    need = (low - zero) * pre
    what = _term(b.window.low_basis, need)
    if low >= 1:
        return (
            f"the weights per GPU ({weights:.2f} GiB) plus {what} need "
            f"{weights + need:.2f} GiB, more than the {pre:.2f} GiB free before loading"
        )
    if high is not None and low > high:
        return (
            f"the weights plus {what} need y ≥ {low:.3f} "
            f"({low * pre:.2f} GiB of the {pre:.2f} GiB free before loading), but "
            f"{b.window.high_basis} needs y ≤ {high:.3f}"
        )
    return None


def _term(basis: str | None, need: float) -> str:
    """A bound's basis as a term of a sum: "a KV pool for … (131072 tokens × … = 16.00 GiB)"."""
    if not basis:
        return f"a KV pool of {need:.2f} GiB"
    name, _, detail = basis.partition(": ")
    return f"{name} ({detail})" if detail else basis


def recommend(b: SglangBudget, suggested: float | None = None) -> Recommendation:
    """The one value to pass for this budget, and why, in one sentence."""
    y, pre, post = b.mem_fraction_static, b.pre_gib, b.post_gib
    low = b.window.low if b.window.low is not None else b.y_zero
    high = b.window.high
    if low is None or pre is None or post is None:
        return Recommendation(
            None,
            "unknown",
            "The memory free before and after the weights load is not known, so no value can "
            "be computed.",
        )
    reason = no_fit_reason(b._replace(window=b.window._replace(low=low)))
    if reason is not None:
        return Recommendation(None, "none_works", f"No {FLAG} works: {reason}.")
    where = placement(low, high, y)
    if where == "inside":
        assert y is not None
        return Recommendation(
            None,
            "keep",
            f"{FLAG} {fmt_y(y)} is inside the workable window {window_text(low, high)}: above "
            f"{low:.3f} for {b.window.low_basis or 'a KV pool'}"
            + (f", and at most {high:.3f} for {b.window.high_basis}" if high is not None else "")
            + ".",
        )
    if where == "above":
        assert high is not None
        for value in lower_candidates(high):
            if value > low:
                kv = kv_at(value, pre, post) - b.kv_reserve_gib
                return Recommendation(
                    value,
                    "lower",
                    f"{fmt_y(value)} is the window's upper bound {high:.3f} ({b.window.high_basis})"
                    f" rounded down: the smallest cut, keeping the largest KV pool ({kv:.2f} GiB) "
                    f"that stays above {low:.3f}.",
                )
        return Recommendation(
            None,
            "none_works",
            f"No {FLAG} works: the window {window_text(low, high)} holds no value to pass.",
        )
    for value in raise_candidates(low, suggested):
        if value > low and (high is None or value <= high):
            cap = f"; it stays at or under {high:.3f} ({b.window.high_basis})" if high else ""
            asked = ", and above SGLang's own suggestion" if suggested is not None else ""
            return Recommendation(
                value,
                "raise",
                f"{fmt_y(value)} is the smallest raise that works: the least workable value "
                f"{low:.3f} ({b.window.low_basis or 'a KV pool that is not empty'}) plus "
                f"{RAISE_MARGIN:.2f} of margin ({RAISE_MARGIN * pre:.2f} GiB of KV pool), "
                f"rounded up{asked}{cap}.",
            )
    return Recommendation(
        None,
        "none_works",
        f"No {FLAG} works: the window {window_text(low, high)} holds no value to pass.",
    )
