"""judge.oom.judge on real-format OOM messages (PyTorch 2.x and 1.x layouts, from fixtures/).

Each message goes through the real pipeline (read → incident → primary failure); the expected
numbers are worked out by hand from the message (1 GiB = 1024 MiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.budget import sglang
from oomdoctor.judge import oom, placed
from oomdoctor.judge.oom import OomJudgement
from oomdoctor.model import Incident, SglangBudget
from oomdoctor.rules.schema import Rule

EMPTY = SglangBudget()

SELF_ONLY = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process "
    "has 77.68 GiB memory in use. Of the allocated memory 75.00 GiB is allocated by PyTorch, and "
    "1.20 GiB is reserved by PyTorch but unallocated."
)
#: A container: the server is `Process 30977` (58.98 ≈ 57.81 + 0.63 reserved, plus 0.55 of
#: context), `Process 31417` is a co-tenant (fixtures/vllm-0.4.2/v0-kv-cache-alloc-cotenant.log).
COTENANT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 110.56 MiB is free. Process 31417 has 20.02 GiB memory in use. "
    "Process 30977 has 58.98 GiB memory in use. Of the allocated memory 57.81 GiB is allocated by "
    "PyTorch, and 640.19 MiB is reserved by PyTorch but unallocated."
)
LEGACY = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.12 GiB (GPU 0; 47.54 GiB "
    "total capacity; 30.05 GiB already allocated; 402.56 MiB free; 30.11 GiB reserved in total by "
    "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation."
)


def _modern(req: str, free: str, this: str, alloc: str = "8.00 GiB", extra: str = "") -> str:
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. GPU 0 has a total "
        f"capacity of 79.19 GiB of which {free} is free. {extra}Including non-PyTorch memory, this "
        f"process has {this} memory in use. Of the allocated memory {alloc} is allocated by "
        "PyTorch, and 0.50 GiB is reserved by PyTorch but unallocated."
    )


def _incident(tmp_path: Path, rules: tuple[Rule, ...], *lines: str) -> Incident:
    path = tmp_path / "oom.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return placed(pipeline.read([str(path)], rules))[0]  # failures placed, as diagnose does


def _judge(
    tmp_path: Path,
    rules: tuple[Rule, ...],
    *lines: str,
    budget: SglangBudget = EMPTY,
    server_pids: frozenset[int] = frozenset(),
) -> OomJudgement:
    incident = _incident(tmp_path, rules, *lines)
    assert incident.primary is not None and incident.primary.kind == "cuda_oom"
    judged = oom.judge(incident, budget, incident.primary, server_pids)
    assert judged is not None
    return judged


def test_the_failing_process_holds_the_card(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    j = _judge(tmp_path, rules, SELF_ONLY)
    assert j.shortfall_gib == pytest.approx(0.50)  # 2.00 − 1.50
    assert j.holders.self_gib == pytest.approx(77.68)
    # used = 79.19 − 1.50 = 77.69; 77.68 ≥ 77.69 − 1.0
    assert j.self_holds_card is True
    assert j.holders.foreign_gib == 0
    assert j.outside_gib == 0  # 77.69 − 77.68 = 0.01 unattributed: below 2 GiB
    assert j.foreign_explains is False
    assert j.exceeds_card is False
    assert j.free_covers_request is False  # 1.50 < max(4.0, 6.0)


@pytest.mark.parametrize(
    ("req", "free", "this", "shortfall", "exceeds", "covers"),
    [
        # requested ≥ total (79.19): no fraction can fit it; short 80 − 70 = 10
        ("80.00 GiB", "70.00 GiB", "9.18 GiB", 10.0, True, False),
        ("79.19 GiB", "70.00 GiB", "9.18 GiB", 9.19, True, False),  # equal counts
        ("79.00 GiB", "70.00 GiB", "9.18 GiB", 9.0, False, False),
        # free ≥ max(2 × req, req + 4): 2 GiB asked, max(4, 6) = 6 needed
        ("2.00 GiB", "6.00 GiB", "73.18 GiB", 0.0, False, True),
        ("2.00 GiB", "5.99 GiB", "73.19 GiB", 0.0, False, False),
        # 10 GiB asked: max(20, 14) = 20 needed
        ("10.00 GiB", "20.00 GiB", "59.18 GiB", 0.0, False, True),
        ("10.00 GiB", "19.99 GiB", "59.19 GiB", 0.0, False, False),
        # MiB requests: 512 MiB = 0.5 GiB, max(1.0, 4.5) = 4.5 needed; short 0 (free ≥ req)
        ("512.00 MiB", "4.50 GiB", "74.68 GiB", 0.0, False, True),
        ("512.00 MiB", "256.00 MiB", "78.93 GiB", 0.25, False, False),  # 0.5 − 0.25
    ],
)
def test_shortfall_card_and_free_room(
    tmp_path: Path,
    rules: tuple[Rule, ...],
    req: str,
    free: str,
    this: str,
    shortfall: float,
    exceeds: bool,
    covers: bool,
) -> None:
    j = _judge(tmp_path, rules, _modern(req, free, this))
    assert j.shortfall_gib == pytest.approx(shortfall, abs=1e-9)
    assert j.exceeds_card is exceeds
    assert j.free_covers_request is covers


@pytest.mark.parametrize(
    ("this", "holds"),
    [
        ("77.68 GiB", True),  # used = 79.19 − 1.50 = 77.69; 77.68 ≥ 77.69 − 1.0
        ("76.70 GiB", True),  # 76.70 ≥ 76.69
        ("76.19 GiB", False),  # 76.19 < 76.69: 1.5 GiB of the used memory is someone else's
        ("40.00 GiB", False),
    ],
)
def test_self_holds_card_within_one_gib(
    tmp_path: Path, rules: tuple[Rule, ...], this: str, holds: bool
) -> None:
    j = _judge(tmp_path, rules, _modern("2.00 GiB", "1.50 GiB", this))
    assert j.self_holds_card is holds


def test_a_per_process_cap_is_not_free_room(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    # 30 GiB free for a 1 GiB request would be roomy, but `39.59 GiB allowed` caps the process.
    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 30.00 GiB is free. Including non-PyTorch memory, this "
        "process has 40.00 GiB memory in use. 39.59 GiB allowed; Of the allocated memory 38.00 GiB "
        "is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
    )
    j = _judge(tmp_path, rules, message)
    assert j.message.allowed_gib == pytest.approx(39.59)
    assert j.free_covers_request is False
    assert j.shortfall_gib == 0.0  # max(1 − 30, 0)
    assert j.self_holds_card is False  # 40.00 < (79.19 − 30.00) − 1 = 48.19


def test_a_foreign_process_in_a_container(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    j = _judge(tmp_path, rules, COTENANT)
    roles = {h.pid: h.role for h in j.holders.holders}
    assert roles == {31417: "foreign", 30977: "self"}
    assert j.holders.self_gib == pytest.approx(58.98)
    assert j.holders.foreign_gib == pytest.approx(20.02)
    # free = 110.56/1024 = 0.10797 GiB; short = 4.00 − 0.10797 = 3.89203
    assert j.shortfall_gib == pytest.approx(3.89203, abs=1e-5)
    # used = 79.15 − 0.108 = 79.04, listed 79.00: 0.04 unattributed is no holder
    assert j.outside_gib == pytest.approx(20.02)
    assert j.foreign_explains is True  # no budget: all of 20.02 ≥ 3.89
    assert j.self_holds_card is False  # 58.98 < 79.04 − 1


@pytest.mark.parametrize(
    ("budget", "explains"),
    [
        # present at start (79.15 − 58 − 0.5 = 20.65 ≥ 0.8 × 20.02 = 16.02): it cost the dynamic
        # share only (1 − 0.90) × 20.02 = 2.00 < 3.89
        (SglangBudget(pre_gib=58.0, mem_fraction_static=0.90), False),
        # (1 − 0.70) × 20.02 = 6.01 ≥ 3.89
        (SglangBudget(pre_gib=58.0, mem_fraction_static=0.70), True),
        # not there at start (79.15 − 70 − 0.5 = 8.65 < 16.02): all of it, 20.02 ≥ 3.89
        (SglangBudget(pre_gib=70.0, mem_fraction_static=0.90), True),
    ],
)
def test_foreign_explains_weighs_a_holder_present_at_start(
    tmp_path: Path, rules: tuple[Rule, ...], budget: SglangBudget, explains: bool
) -> None:
    assert _judge(tmp_path, rules, COTENANT, budget=budget).foreign_explains is explains


def test_a_pid_the_snapshot_shows_as_the_server_is_no_cotenant(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    j = _judge(tmp_path, rules, COTENANT, server_pids=frozenset({31417}))
    assert {h.pid: h.role for h in j.holders.holders}[31417] == "peer"
    assert j.holders.foreign_gib == 0
    assert j.outside_gib == 0
    assert j.foreign_explains is False


def test_tensor_parallel_peer_context_is_not_foreign(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    args = "[2025-09-22 08:31:40] server_args=ServerArgs(model_path='/models/m', mem_fraction_static=0.85, tp_size=2)"
    message = _modern(
        "2.00 GiB",
        "1.50 GiB",
        "68.48 GiB",
        alloc="66.00 GiB",
        extra="Process 4242 has 1.20 GiB memory in use. Process 5151 has 8.00 GiB memory in use. ",
    )
    j = _judge(tmp_path, rules, args, message)
    roles = {h.pid: h.role for h in j.holders.holders}
    assert roles[4242] == "peer"  # 1.20 < 1.5 GiB on a TP server: a peer rank's context
    assert roles[5151] == "foreign"
    assert j.holders.foreign_gib == pytest.approx(8.0)
    # 79.19 − 1.50 − (68.48 + 1.20 + 8.00) = 0.01 hidden: no holder
    assert j.outside_gib == pytest.approx(8.0)
    assert j.foreign_explains is True  # 8.0 ≥ 2.00 − 1.50 = 0.50
    assert j.self_holds_card is False  # 68.48 < 77.69 − 1


def test_memory_no_process_holds_is_a_hidden_holder(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    # "this process" holds 70.00 of 77.69 used (79.19 − 1.50): 7.69 GiB held by nobody listed
    j = _judge(tmp_path, rules, _modern("2.00 GiB", "1.50 GiB", "70.00 GiB", alloc="68.00 GiB"))
    assert j.holders.hidden_gib == pytest.approx(7.69)
    assert j.outside_gib == pytest.approx(7.69)  # ≥ 2 GiB: counted as a holder
    assert j.foreign_explains is True  # 7.69 ≥ 0.50
    assert j.self_holds_card is False  # 70.00 < 76.69


def test_legacy_message_without_process_clauses(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    j = _judge(tmp_path, rules, LEGACY)
    # this process = what PyTorch reserved, 30.11 GiB (estimated)
    assert j.holders.self_gib == pytest.approx(30.11)
    assert j.holders.self_estimated is True
    # free 402.56 MiB = 0.39313 GiB; short = 1.12 − 0.39313 = 0.72688
    assert j.shortfall_gib == pytest.approx(0.72688, abs=1e-5)
    # unattributed 47.54 − 0.39313 − 30.11 = 17.03688; less a non-PyTorch allowance of
    # min(max(0.1 × 47.54, 1.5), 6) = 4.754 → hidden 12.28288
    assert j.holders.unattributed_gib == pytest.approx(17.03688, abs=1e-5)
    assert j.outside_gib == pytest.approx(12.28288, abs=1e-5)
    assert j.foreign_explains is True
    assert j.exceeds_card is False
    assert j.free_covers_request is False
    assert j.self_holds_card is False  # 30.11 < 47.15 − 1


def test_judged_with_the_incidents_own_budget(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    lines = (
        "[2025-09-22 08:31:40] server_args=ServerArgs(model_path='/models/m', mem_fraction_static=0.85, tp_size=1)",
        "[2025-09-22 08:31:51] Load weight begin. avail mem=58.00 GB",
        "[2025-09-22 08:32:29] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=28.00 GB, mem usage=30.00 GB.",
        "[2025-09-22 08:32:44] The server is fired up and ready to roll!",
        "[2025-09-22 08:34:39] Scheduler hit an exception: Traceback (most recent call last):",
        COTENANT,
    )
    incident = _incident(tmp_path, rules, *lines)
    budget = sglang.build(incident, incident.primary)
    assert budget.pre_gib == pytest.approx(58.0)
    j = oom.judge(incident, budget, incident.primary)
    assert j is not None
    # 20.02 GiB present at start (79.15 − 58 − 0.5 = 20.65 ≥ 16.02) at y = 0.85:
    # (1 − 0.85) × 20.02 = 3.003 < 3.892 short
    assert j.foreign_explains is False


def test_a_failure_that_is_not_an_oom_gets_no_judgement(
    tmp_path: Path, rules: tuple[Rule, ...]
) -> None:
    incident = _incident(
        tmp_path,
        rules,
        "[2025-09-22 08:14:03] server_args=ServerArgs(model_path='/models/m', mem_fraction_static=0.7, tp_size=1)",
        "[2025-09-22 08:14:14] Load weight begin. avail mem=78.00 GB",
        "[2025-09-22 08:14:53] Load weight end. type=Olmo2ForCausalLM, dtype=torch.bfloat16, avail mem=18.00 GB, mem usage=60.00 GB.",
        "[2025-09-22 08:14:53] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    )
    assert incident.primary is not None
    assert incident.primary.kind == "startup_kv_error"
    assert oom.judge(incident, EMPTY, incident.primary) is None


def test_no_failure_gets_no_judgement(tmp_path: Path, rules: tuple[Rule, ...]) -> None:
    incident = _incident(
        tmp_path, rules, "[2025-09-22 08:14:14] Load weight begin. avail mem=78.00 GB"
    )
    assert incident.primary is None
    assert oom.judge(incident, EMPTY, None) is None
