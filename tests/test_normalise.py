"""Envelopes of every SGLang version and the collectors around them (sglang-logs.md §1)."""

from __future__ import annotations

import pytest

from oomdoctor.extract.normalise import normalise, rank_numbers

MSG = "Load weight begin. avail mem=78.00 GB"


@pytest.mark.parametrize(
    ("raw", "rank", "ts"),
    [
        (f"[2025-09-22 08:14:14] {MSG}", None, "2025-09-22 08:14:14"),
        (f"[2025-09-22 08:14:14 TP3] {MSG}", "TP3", "2025-09-22 08:14:14"),
        (f"[2025-09-22 08:14:14 DP2 TP2 EP2] {MSG}", "DP2 TP2 EP2", "2025-09-22 08:14:14"),
        (f"[2024-11-02 10:00:01 DP-1 TP0] {MSG}", "DP-1 TP0", "2024-11-02 10:00:01"),  # 0.3.6
        (f"[2026-01-05 11:22:33.456 PP1 TP5] {MSG}", "PP1 TP5", "2026-01-05 11:22:33.456"),
        (
            f"[2026-01-05 11:22:33 DP0 ATTN_CP1 MOE_DP0 TP1 EP1] {MSG}",
            "DP0 ATTN_CP1 MOE_DP0 TP1 EP1",
            None,
        ),
        (f"sglang-1  | [2025-09-22 08:14:14 TP1] {MSG}", "TP1", None),
        (
            f"2025-06-03T10:15:22.123456789Z [2025-06-03 10:15:22 TP0] {MSG}",
            "TP0",
            "2025-06-03 10:15:22",
        ),
        (f"(SchedulerActor pid=1234, ip=10.0.0.1) [2025-06-03 10:15:22 TP0] {MSG}", "TP0", None),
        (f"(WorkerDict pid=12504) [2025-06-03 10:15:22] {MSG}", None, None),
        (f"> [2025-06-03 10:15:22 TP0] {MSG}", "TP0", None),
        (f"\x1b[32m[2025-06-03 10:15:22 TP0] {MSG}\x1b[0m", "TP0", None),
        (
            f"2026-05-11 10:20:09,902 [INFO] sglang_omni.stages: {MSG}",
            None,
            "2026-05-11 10:20:09.902",
        ),
        (f"INFO 11-05 03:21:41 model_runner.py:1025] {MSG}", None, "11-05 03:21:41"),
        (f"(VllmWorkerProcess pid=67) INFO 11-05 03:21:41 [gpu_worker.py:1025] {MSG}", None, None),
        # vLLM 0.10 worker prefixes name the rank (vllm/utils decorate_logs)
        (f"(VllmWorker TP1 pid=812) INFO 08-21 14:02:11 [gpu_worker.py:276] {MSG}", "TP1", None),
        (f"(VllmWorker PP1_TP0 pid=9) INFO 08-21 14:02:11 [a.py:2] {MSG}", "PP1 TP0", None),
        (f"(VllmWorker rank=2 pid=9) INFO 08-21 14:02:11 [a.py:2] {MSG}", "TP2", None),
        (
            f"\x1b[36m(EngineCore_0 pid=77)\x1b[0m ERROR 08-21 14:02:11 [core.py:1] {MSG}",
            None,
            None,
        ),
        (f"Jun 03 10:15:22 gpu-host python3[1234]: [2025-06-03 10:15:22 TP2] {MSG}", "TP2", None),
        (f"[pod/sglang-0/server] [2025-06-03 10:15:22 TP0] {MSG}", "TP0", None),
    ],
)
def test_envelopes_are_stripped(raw: str, rank: str | None, ts: str | None) -> None:
    env = normalise(raw)
    assert env.text == MSG
    assert env.rank == rank
    if ts is not None:
        assert env.ts == ts


def test_ray_pid_is_remembered() -> None:
    env = normalise("(WorkerDict pid=12504) torch.OutOfMemoryError: CUDA out of memory.")
    assert env.actor_pid == 12504
    assert env.text.startswith("torch.OutOfMemoryError")


def test_ray_repeat_suffix() -> None:
    env = normalise(
        "(SchedulerActor pid=9, ip=10.0.0.2) [2025-01-01 00:00:00 TP1] x [repeated 7x across cluster]"
    )
    assert env.text == "x"


def test_traceback_continuation_keeps_indentation() -> None:
    env = normalise('sglang-1  |   File "/x/scheduler.py", line 10, in run_batch')
    assert env.text == '  File "/x/scheduler.py", line 10, in run_batch'
    assert not env.enveloped


def test_table_rows_are_not_compose_prefixes() -> None:
    row = "|       Allocated memory      |  70.1 GiB  |"
    assert normalise(row).text == row


def test_control_characters_and_nul_are_removed() -> None:
    assert normalise("[2025-01-01 00:00:00] a\x00b\x07c").text == "abc"


def test_rank_numbers() -> None:
    assert rank_numbers("DP0 TP3 EP3") == {"DP": 0, "TP": 3, "EP": 3}
    assert rank_numbers("DP-1 TP0") == {"DP": -1, "TP": 0}
    assert rank_numbers(None) == {}
