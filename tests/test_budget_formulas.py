"""The formulas of DESIGN §2 (budget.formulas) and the judgements of budget.costs, table-driven.

Every expected value is worked out by hand in the table (the comment shows the arithmetic); none
is computed with the code under test. The worked example throughout: H100 80 GB, pre = 78.00 GiB
free before the weights load, post = 18.00 GiB after (weights 60.00 GiB).
"""

from __future__ import annotations

import pytest

from oomdoctor.budget import costs
from oomdoctor.budget.formulas import (
    CONTEXT_OVERHEAD_GIB,
    GIB,
    kv_at,
    omni_stage_kv,
    round_down,
    round_up,
    runtime_spare,
    snap_between,
    snap_bytes_per_token,
    y_for_kv,
)
from oomdoctor.model import Failure, Line, OomMessage, SglangBudget, VllmBudget

PRE, POST = 78.0, 18.0
LINE = Line(source=0, number=1, seq=0, text="", raw="")


def test_constants() -> None:
    assert GIB == 1073741824.0  # 2**30
    assert CONTEXT_OVERHEAD_GIB == 1.35


# --- kv_at / y_for_kv -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y", "pre", "post", "kv"),
    [
        (0.70, PRE, POST, -5.40),  # 18 − 0.30·78 = 18 − 23.40
        (0.85, PRE, POST, 6.30),  # 18 − 0.15·78 = 18 − 11.70
        (0.8615, PRE, POST, 7.197),  # 18 − 0.1385·78 = 18 − 10.803
        (0.8654, PRE, POST, 7.5012),  # 18 − 0.1346·78 = 18 − 10.4988
        (1.0, PRE, POST, 18.0),  # no dynamic share: the whole of post is KV
        (0.0, PRE, POST, -60.0),  # 18 − 78: minus the weights
        (0.70, 96.0, 36.0, 7.20),  # DESIGN's H20: 36 − 0.30·96 = 36 − 28.80
    ],
)
def test_kv_at(y: float, pre: float, post: float, kv: float) -> None:
    assert kv_at(y, pre, post) == pytest.approx(kv, abs=1e-9)


def test_kv_grows_by_pre_per_unit_of_y() -> None:
    # KV(y') = KV(y) + (y' − y)·pre: 0.85 − 0.70 = 0.15, × 78 = 11.70 GiB
    assert kv_at(0.85, PRE, POST) - kv_at(0.70, PRE, POST) == pytest.approx(11.70)


@pytest.mark.parametrize(
    ("kv", "y"),
    [
        (-5.40, 0.70),  # 1 − (18 + 5.40)/78 = 1 − 0.30
        (6.30, 0.85),  # 1 − (18 − 6.30)/78 = 1 − 11.70/78 = 1 − 0.15
        (7.5012, 0.8654),  # 1 − 10.4988/78 = 1 − 0.1346
        (0.0, 0.769230769),  # the empty pool: 1 − post/pre = 1 − 18/78 = 60/78
        (18.0, 1.0),  # 1 − 0/78
    ],
)
def test_y_for_kv(kv: float, y: float) -> None:
    assert y_for_kv(kv, PRE, POST) == pytest.approx(y, abs=1e-9)


@pytest.mark.parametrize("y", [0.5, 0.70, 0.7692, 0.85, 0.93])
def test_y_for_kv_inverts_kv_at(y: float) -> None:
    assert y_for_kv(kv_at(y, PRE, POST), PRE, POST) == pytest.approx(y, abs=1e-12)


def test_empty_pool_fraction() -> None:
    # 1 − post/pre = 1 − 18/78 = 0.76923: the KV pool is exactly empty there
    assert kv_at(0.769230769230769, PRE, POST) == pytest.approx(0.0, abs=1e-9)
    assert kv_at(0.7692, PRE, POST) < 0 < kv_at(0.7693, PRE, POST)


# --- rounding -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y", "step", "up", "down"),
    [
        (0.82, 0.01, 0.82, 0.82),  # 0.82/0.01 = 82.00000000000001 in floats: noise, stays
        (0.8201, 0.01, 0.83, 0.82),
        (0.8200000001, 0.01, 0.82, 0.82),  # 82.00000001 rounds to 82.000000 (6 places) first
        (0.8200005, 0.01, 0.83, 0.82),  # 82.00005 survives 6-place rounding: a real excess
        (0.8299999999, 0.01, 0.83, 0.83),  # 82.99999999 → 83.000000: noise, not 0.82
        (0.8299, 0.01, 0.83, 0.82),
        (0.70, 0.01, 0.70, 0.70),  # 0.7/0.01 = 69.99999999999999
        (0.70, 0.1, 0.70, 0.70),  # 0.7/0.1 = 6.999999999999999
        (0.81, 0.05, 0.85, 0.80),
        (0.89, 0.05, 0.90, 0.85),
        (0.523374, 0.01, 0.53, 0.52),
    ],
)
def test_round_up_and_down(y: float, step: float, up: float, down: float) -> None:
    assert round_up(y, step) == up
    assert round_down(y, step) == down


# --- bytes per token ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kv_gib", "tokens", "bpt"),
    [
        # 6.30 GiB printed for 25804 tokens (OLMo-2 32B: 8 heads·128·64 layers·2·2 B = 262144):
        # 6.29..6.31 GiB / 25804 = 261738..262570 B, and 262144 = 2^18 lies inside.
        (6.30, 25804, 262144),
        # 7.50 GiB for 61440 tokens: 7.5·2^30/61440 = 131072 exactly (2^17).
        (7.50, 61440, 131072),
        # 58.80 GiB for 481712 tokens: 58.79..58.81 GiB → 131045..131090 B; 2^17 = 131072 inside.
        (58.80, 481712, 131072),
        # 32.31 GiB for 26469 blocks·16 = 423504 tokens: 81893..81944 B; 81920 = 5·2^14 inside
        # (65536 and 98304, the multiples of 2^15 around it, are outside).
        (32.31, 423504, 81920),
        # 7.19 GiB for 120000 tokens: central 7.19·2^30/120000 = 64335.03 B, interval
        # 7.18..7.20 GiB → 64245.55..64424.51 B. Nearest multiples: 2^16 → 65536 (out),
        # 2^12 → 16·4096 = 65536 (out), 2^11 → 31·2048 = 63488 (out),
        # 2^10 and 2^9 → 64512 (out, > 64424.51), 2^8 → 251·256 = 64256 (in).
        (7.19, 120000, 64256),
    ],
)
def test_snap_bytes_per_token(kv_gib: float, tokens: int, bpt: int) -> None:
    assert snap_bytes_per_token(kv_gib, tokens) == bpt


@pytest.mark.parametrize(
    ("low", "high", "central", "snapped"),
    [
        (261738.0, 262570.0, 262154.6, 262144),  # 2^18 inside
        (1000.0, 1100.0, 1050.0, 1024),  # 2^10 = 1024 inside
        (100.2, 100.4, 100.3, 100),  # no multiple of 2^4..2^20 inside: round(central)
        (-10.0, 10.0, 0.4, 0),  # 0 is never a candidate; round(0.4) = 0
    ],
)
def test_snap_between(low: float, high: float, central: float, snapped: int) -> None:
    assert snap_between(low, high, central) == snapped


# --- runtime spare, Omni stage KV ------------------------------------------------------------


@pytest.mark.parametrize(
    ("headroom", "spare"),
    [
        (0.0, 2.0),  # at least 2 GiB
        (3.9, 2.0),  # 3.9/2 = 1.95 < 2
        (4.0, 2.0),  # 4/2 = 2
        (10.62, 5.31),  # 10.62/2
        (30.0, 15.0),
        (-1.0, 2.0),
    ],
)
def test_runtime_spare(headroom: float, spare: float) -> None:
    assert runtime_spare(headroom) == pytest.approx(spare)


@pytest.mark.parametrize(
    ("total", "fraction", "used", "kv"),
    [
        (80.0, 0.5, 30.0, 10.0),  # int(80·2^30·0.5) = 40 GiB exactly, − 30
        (79.19, 0.85, 60.0, 7.3115),  # 79.19·0.85 = 67.3115, − 60 (truncation < 1 byte)
        (40.0, 0.25, 12.5, -2.5),  # 10 − 12.5: the stage already holds more than its budget
        (3 / GIB, 0.5, 0.0, 1 / GIB),  # 3 bytes × 0.5 = 1.5 bytes, truncated to 1 byte
    ],
)
def test_omni_stage_kv(total: float, fraction: float, used: float, kv: float) -> None:
    assert omni_stage_kv(total, fraction, used) == pytest.approx(kv, rel=1e-9, abs=1e-6)


# --- costs: the server's expected size ---------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "message_self", "expected"),
    [
        (SglangBudget(weights_gib=60.0), 76.71, 76.71),  # the OOM message's own figure wins
        (SglangBudget(), None, None),  # no weights: cannot tell
        (VllmBudget(kv_gib=10.0), None, None),
        # logged KV preferred over computed: 60 + 6.30 + 0.92 graphs + 1.35 context = 68.57
        (
            SglangBudget(weights_gib=60.0, kv_gib=6.29, kv_logged_gib=6.30, graph_gib=0.92),
            None,
            68.57,
        ),
        # a negative computed pool counts as 0: 60 + 0 + 0 + 1.35
        (SglangBudget(weights_gib=60.0, kv_gib=-5.40), None, 61.35),
        (SglangBudget(weights_gib=60.0), None, 61.35),  # KV unknown: 60 + 1.35
        # vLLM has no logged pool: 14.99 + 58.80 + 0.56 + 1.35 = 75.70
        (VllmBudget(weights_gib=14.99, kv_gib=58.80, graph_gib=0.56), None, 75.70),
    ],
)
def test_expected_server_gib(
    budget: SglangBudget | VllmBudget, message_self: float | None, expected: float | None
) -> None:
    got = costs.expected_server_gib(budget, message_self)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("gib", "expected", "match"),
    [
        (None, 60.0, False),
        (60.0, None, False),
        (None, None, False),
        (68.57, 70.57, True),  # |68.57 − 70.57| = 2.00 ≤ max(2, 0.05·70.57 = 3.53)
        (66.5, 70.0, True),  # 3.5 ≤ max(2, 3.5)
        (66.4, 70.0, False),  # 3.6 > 3.5
        (22.0, 20.0, True),  # 2.0 ≤ max(2, 1.0)
        (22.01, 20.0, False),  # 2.01 > 2
        (17.99, 20.0, False),
    ],
)
def test_matches_server(gib: float | None, expected: float | None, match: bool) -> None:
    assert costs.matches_server(gib, expected) is match


# --- costs: holders present at start ---------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "gib", "budget", "present"),
    [
        # 79.15 − 58 − 1.35 = 19.80 ≥ 0.8·20.02 = 16.016
        (79.15, 20.02, SglangBudget(pre_gib=58.0), True),
        # 19.80 < 0.8·25 = 20.0
        (79.15, 25.0, SglangBudget(pre_gib=58.0), False),
        # 79.15 − 76 − 1.35 = 1.80 < 0.8·20.02
        (79.15, 20.02, SglangBudget(pre_gib=76.0), False),
        (None, 20.0, SglangBudget(pre_gib=58.0), None),
        (79.15, None, SglangBudget(pre_gib=58.0), None),
        (79.15, 20.0, SglangBudget(), None),
        (79.15, 20.0, VllmBudget(capacity_gib=79.15), None),  # vLLM has no pre
    ],
)
def test_present_at_start(
    total: float | None, gib: float | None, budget: SglangBudget | VllmBudget, present: bool | None
) -> None:
    assert costs.present_at_start(total, gib, budget) is present


@pytest.mark.parametrize(
    ("gib", "budget", "cost"),
    [
        (10.0, SglangBudget(mem_fraction_static=0.85), 8.5),  # 0.85 × 10
        (20.02, SglangBudget(mem_fraction_static=0.70), 14.014),  # 0.70 × 20.02
        (None, SglangBudget(mem_fraction_static=0.85), None),
        (10.0, SglangBudget(), None),
        (10.0, VllmBudget(gpu_memory_utilization=0.9), None),  # u is not y
    ],
)
def test_kv_cost(gib: float | None, budget: SglangBudget | VllmBudget, cost: float | None) -> None:
    got = costs.kv_cost(gib, budget)
    if cost is None:
        assert got is None
    else:
        assert got == pytest.approx(cost)


@pytest.mark.parametrize(
    ("capacity", "budget", "gap"),
    [
        (79.19, SglangBudget(pre_gib=58.0), 19.84),  # 79.19 − 58 − 1.35
        (79.19, SglangBudget(pre_gib=78.0), -0.16),  # 79.19 − 78 − 1.35
        (None, SglangBudget(pre_gib=58.0), None),
        (79.19, SglangBudget(), None),
        (79.19, VllmBudget(), None),
    ],
)
def test_start_gap(
    capacity: float | None, budget: SglangBudget | VllmBudget, gap: float | None
) -> None:
    got = costs.start_gap(capacity, budget)
    if gap is None:
        assert got is None
    else:
        assert got == pytest.approx(gap)


Y70_SHORT = SglangBudget(mem_fraction_static=0.70, kv_gib=-5.40)


@pytest.mark.parametrize(
    ("gap", "budget", "explains"),
    [
        (19.84, Y70_SHORT, True),  # 0.70·19.84 = 13.89 ≥ 5.40
        (7.72, Y70_SHORT, True),  # 0.70·7.72 = 5.404 ≥ 5.40
        (7.0, Y70_SHORT, False),  # 0.70·7 = 4.90 < 5.40
        # below MIN_START_GAP_GIB (3.0) even though 0.70·2.9 = 2.03 ≥ 1.0
        (2.9, SglangBudget(mem_fraction_static=0.70, kv_gib=-1.0), False),
        (3.0, SglangBudget(mem_fraction_static=0.70, kv_gib=-1.0), True),  # 2.1 ≥ 1.0
        (19.84, SglangBudget(mem_fraction_static=0.85, kv_gib=6.30), False),  # no shortage
        (19.84, SglangBudget(mem_fraction_static=0.85, kv_gib=0.0), False),
        (None, Y70_SHORT, False),
        (19.84, SglangBudget(kv_gib=-5.40), False),  # y unknown
        (19.84, SglangBudget(mem_fraction_static=0.70), False),  # KV unknown
        (19.84, VllmBudget(kv_gib=-0.94), False),  # vLLM: no y
    ],
)
def test_start_gap_explains(
    gap: float | None, budget: SglangBudget | VllmBudget, explains: bool
) -> None:
    assert costs.start_gap_explains(gap, budget) is explains


# --- costs: would the failure have happened without the foreign holders? -----------------------

AT_START = SglangBudget(pre_gib=58.0, mem_fraction_static=0.90)
LATE = SglangBudget(pre_gib=70.0, mem_fraction_static=0.90)


@pytest.mark.parametrize(
    ("foreign", "shortfall", "budget", "total", "explains"),
    [
        (0.99, None, SglangBudget(), 79.15, False),  # below MIN_FOREIGN_GIB (1.0)
        (0.99, 0.10, SglangBudget(), 79.15, False),
        (1.0, None, SglangBudget(), 79.15, True),  # unsized failure: a holder explains it
        # present at start (79.15 − 58 − 0.5 = 20.65 ≥ 0.8·20.02 = 16.02): only the dynamic
        # share of it, (1 − 0.90)·20.02 = 2.00, was taken from the allocation
        (20.02, 3.89, AT_START, 79.15, False),  # 2.00 < 3.89
        (20.02, 1.50, AT_START, 79.15, True),  # 2.00 ≥ 1.50
        # not present at start (79.15 − 70 − 0.5 = 8.65 < 16.02): all of it, 20.02 ≥ 3.89
        (20.02, 3.89, LATE, 79.15, True),
        (3.0, 3.89, LATE, 79.15, False),  # 3.0 < 3.89
        (20.02, 3.89, SglangBudget(), 79.15, True),  # pre unknown: all of it
        (20.02, 3.89, AT_START, None, True),  # total unknown: all of it
        # at start but y unknown: all of it
        (20.02, 3.89, SglangBudget(pre_gib=58.0), 79.15, True),
        (20.02, 21.0, VllmBudget(), 79.15, False),  # 20.02 < 21.0
        (5.0, 0.0, SglangBudget(), 79.15, True),  # no shortfall at all: any holder ≥ 1 GiB
    ],
)
def test_message_foreign_explains(
    foreign: float,
    shortfall: float | None,
    budget: SglangBudget | VllmBudget,
    total: float | None,
    explains: bool,
) -> None:
    assert costs.message_foreign_explains(foreign, shortfall, budget, total) is explains


def test_message_foreign_explains_allows_half_a_gib_of_context() -> None:
    """Present at start here means total − pre − 0.5 ≥ 0.8 × the holder, while present_at_start
    subtracts CONTEXT_OVERHEAD_GIB (1.35): between the two the answers differ."""
    budget = SglangBudget(pre_gib=62.0, mem_fraction_static=0.90)
    # 79.15 − 62 − 0.5 = 16.65 ≥ 0.8 × 20.02 = 16.016: at start, so only (1 − 0.9) × 20.02 =
    # 2.00 of it counts, < 3.89 short
    assert costs.message_foreign_explains(20.02, 3.89, budget, 79.15) is False
    # 79.15 − 62 − 1.35 = 15.80 < 16.016: present_at_start says it was not there
    assert costs.present_at_start(79.15, 20.02, budget) is False


def _failure(kind: str, oom: OomMessage | None = None) -> Failure:
    return Failure(kind=kind, line=LINE, message="", oom=oom)


RUNTIME_OOM = _failure("cuda_oom", OomMessage("pytorch", requested_gib=4.0, free_gib=0.11))
Y90 = SglangBudget(mem_fraction_static=0.90)


@pytest.mark.parametrize(
    ("holders", "budget", "primary", "explains"),
    [
        ([(0.6, False), (0.3, False)], Y90, RUNTIME_OOM, False),  # 0.9 GiB in all: noise
        ([(20.0, False)], Y90, None, False),  # no failure to explain
        # startup KV shortage: y·total ≥ −KV → 0.70·8 = 5.6 ≥ 5.40
        ([(8.0, True)], Y70_SHORT, _failure("startup_kv_error"), True),
        ([(5.0, True), (3.0, None)], Y70_SHORT, _failure("negative_profile"), True),
        ([(7.0, True)], Y70_SHORT, _failure("startup_kv_error"), False),  # 4.9 < 5.40
        # KV or y unknown: a holder of 2 GiB or more explains it
        ([(2.0, None)], SglangBudget(), _failure("startup_kv_error"), True),
        ([(1.5, None)], SglangBudget(), _failure("startup_kv_error"), False),
        ([(1.5, None)], Y90, _failure("tp_imbalance"), True),  # imbalance is the co-tenant
        # runtime OOM, short 4.00 − 0.11 = 3.89:
        ([(20.0, True)], Y90, RUNTIME_OOM, False),  # at start: (1 − 0.9)·20 = 2.0 < 3.89
        ([(20.0, False)], Y90, RUNTIME_OOM, True),  # grew later: 20 ≥ 3.89
        ([(20.0, None)], Y90, RUNTIME_OOM, True),  # unknown when it came: all of it
        ([(20.0, True)], SglangBudget(), RUNTIME_OOM, True),  # y unknown: all of it
        ([(30.0, True), (1.0, False)], Y90, RUNTIME_OOM, True),  # 3.0 + 1.0 = 4.0 ≥ 3.89
        ([(30.0, True), (0.8, False)], Y90, RUNTIME_OOM, False),  # 3.0 + 0.8 = 3.8 < 3.89
        # an OOM without numbers: 2 GiB or more explains it
        ([(2.0, False)], Y90, _failure("cuda_oom"), True),
        ([(1.9, False)], Y90, _failure("cuda_oom"), False),
        ([(2.0, False)], Y90, _failure("cuda_oom", OomMessage("pytorch", requested_gib=4)), True),
    ],
)
def test_snapshot_foreign_explains(
    holders: list[tuple[float, bool | None]],
    budget: SglangBudget,
    primary: Failure | None,
    explains: bool,
) -> None:
    assert costs.snapshot_foreign_explains(holders, budget, primary) is explains
