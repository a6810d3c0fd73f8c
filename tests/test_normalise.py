"""Envelopes of every version the references read, and the prefixes around them.

Every input is written from a reference template (`../shared/reference/sglang-logs.md` §1, §6.1,
§10.1, §11; `vllm-logs.md` "Log envelope by version"; `pytorch-oom.md` §5.5, §5.9), filled with
made-up values; none is copied from a log.
"""

from __future__ import annotations

import re

import pytest

from oomdoctor.extract import shape
from oomdoctor.extract.normalise import known_at, normalise, rank_numbers

#: sglang-logs.md §2.2: `Load weight begin. avail mem={avail:.2f} GB`.
MSG = "Load weight begin. avail mem=61.25 GB"


@pytest.mark.parametrize(
    ("raw", "rank", "ts", "style"),
    [
        # §1.1: `[%(asctime)s{prefix}] %(message)s`, datefmt `%Y-%m-%d %H:%M:%S`
        (f"[2026-03-02 09:41:07] {MSG}", None, "2026-03-02 09:41:07", "sglang"),
        (f"[2026-03-02 09:41:07 TP1] {MSG}", "TP1", "2026-03-02 09:41:07", "sglang"),
        # §1.2, 0.3.6: always ` DP{dp_rank} TP{tp_rank}`, DP-1 without DP
        (f"[2026-03-02 09:41:07 DP-1 TP0] {MSG}", "DP-1 TP0", "2026-03-02 09:41:07", "sglang"),
        # §1.2, 0.4.10: DP, TP, EP, PP in that order
        (f"[2026-03-02 09:41:07 DP1 TP3 EP3] {MSG}", "DP1 TP3 EP3", None, "sglang"),
        # §1.1, 0.5.10+ with SGLANG_LOG_MS=1; §1.2 0.5.23 order DP PP ATTN_CP MOE_DP TP EP
        (
            f"[2026-03-02 09:41:07.382 DP0 PP1 ATTN_CP1 MOE_DP0 TP5 EP5] {MSG}",
            "DP0 PP1 ATTN_CP1 MOE_DP0 TP5 EP5",
            "2026-03-02 09:41:07.382",
            "sglang",
        ),
        # §10.1, 0.2.14 - 0.3.2: time only
        (f"[09:41:07 TP2] {MSG}", "TP2", "09:41:07", "sglang-time"),
        # §1.1: sglang/multimodal_gen, datefmt `%m-%d %H:%M:%S`
        (f"[03-02 09:41:07] {MSG}", None, "03-02 09:41:07", "sglang"),
        # §6.1: Omni, `%(asctime)s [%(levelname)s] %(name)s: %(message)s`
        (
            f"2026-03-02 09:41:07,382 [INFO] sglang_omni.pipeline.stage_workers: {MSG}",
            None,
            "2026-03-02 09:41:07.382",
            "omni-sglang",
        ),
        # vllm-logs.md: 0.7.3 `%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s`
        (f"INFO 03-02 09:41:07 worker.py:134] {MSG}", None, "03-02 09:41:07", "vllm-old"),
        # 0.8.5 / 0.10.2: `[%(fileinfo)s:%(lineno)d]`
        (f"INFO 03-02 09:41:07 [gpu_worker.py:96] {MSG}", None, "03-02 09:41:07", "vllm"),
        # 0.33.0: `(%(vllm_process_name)s pid=%(process)d) ` before the level
        (f"(Worker_TP1 pid=4117) INFO 03-02 09:41:07 [gpu_worker.py:96] {MSG}", None, None, "vllm"),
        # sglang-logs.md §11: `VllmWorker rank={n}`, `Worker_PP{p}_TP{t}`; Ray adds `, ip=`
        (f"(VllmWorker rank=2 pid=4117) INFO 03-02 09:41:07 [a.py:7] {MSG}", "TP2", None, "vllm"),
        (f"(VllmWorker TP3 pid=4117) INFO 03-02 09:41:07 [a.py:7] {MSG}", "TP3", None, "vllm"),
        (
            f"(VllmWorker PP1_TP0 pid=4117) INFO 03-02 09:41:07 [a.py:7] {MSG}",
            "PP1 TP0",
            None,
            "vllm",
        ),
        (
            f"(SchedulerActor pid=4117, ip=10.1.2.3) [2026-03-02 09:41:07 TP0] {MSG}",
            "TP0",
            None,
            "sglang",
        ),
        # vllm-logs.md: before 0.33 the prefix is written with its colour codes, always
        (
            f"\x1b[1;36m(EngineCore_DP0 pid=4117)\x1b[0;0m ERROR 03-02 09:41:07 [core.py:9] {MSG}",
            None,
            None,
            "vllm",
        ),
    ],
)
def test_logger_envelopes(raw: str, rank: str | None, ts: str | None, style: str) -> None:
    env = normalise(raw)
    assert env.text == MSG
    assert env.rank == rank
    assert env.style == style
    assert env.enveloped
    if ts is not None:
        assert env.ts == ts


@pytest.mark.parametrize(
    ("raw", "text", "level", "style"),
    [
        # pytorch-oom.md §5.5: `[rank{R}]:[{S}{MMDD} {HH:MM:SS}.{ns} {basename}:{line}] {msg}`
        (
            "[rank3]:[W302 09:41:07.123456789 ProcessGroupNCCL.cpp:1250] Warning: x (function f)",
            "Warning: x (function f)",
            "WARNING",
            "torch-cpp",
        ),
        # §5.5: torch 2.2.0 prints no date and no time
        ("[W socket.cpp:464] Warning: x", "Warning: x", "WARNING", "torch-cpp"),
        # §5.9: torch_npu's trailer
        (
            "[ERROR] 2026-03-02-09:41:07 (PID:4117, Device:1, RankID:-1) ERR00006 PTA memory error",
            "ERR00006 PTA memory error",
            "ERROR",
            "ascend",
        ),
        # Python's default logging format: `%(levelname)s:%(name)s:%(message)s`
        ("WARNING:root:something", "something", "WARNING", "pylog"),
        # glog-style torch logging: `{S}{MMDD} {HH:MM:SS.us} {pid} {file}:{line}] `
        (
            "W0302 09:41:07.123000 4117 torch/distributed/run.py:793] something",
            "something",
            "WARNING",
            "glog",
        ),
    ],
)
def test_c_and_python_envelopes(raw: str, text: str, level: str, style: str) -> None:
    env = normalise(raw)
    assert (env.text, env.level, env.style) == (text, level, style)


def test_torch_rank_prefix_names_the_rank() -> None:
    env = normalise("[rank5]:[W302 09:41:07.123456789 CUDACachingAllocator.cpp:3933] x")
    assert env.rank == "TP5"
    assert env.text == "x"


def test_ray_pid_is_remembered() -> None:
    env = normalise("(TaskRunner pid=4117) torch.OutOfMemoryError: CUDA out of memory.")
    assert (env.actor_pid, env.actor) == (4117, "TaskRunner")
    assert env.text.startswith("torch.OutOfMemoryError")


def test_ray_repeat_suffix() -> None:
    raw = f"(SchedulerActor pid=4117, ip=10.1.2.3) [2026-03-02 09:41:07 TP1] {MSG} [repeated 7x across cluster]"
    assert normalise(raw).text == MSG


@pytest.mark.parametrize(
    "raw",
    [
        # a collector's RFC 3339 time, bare (kubectl --timestamps) or bracketed (a CI viewer)
        f"2026-03-02T09:41:07.123456789Z [2026-03-02 09:41:07 TP0] {MSG}",
        f"[2026-03-02T09:41:07Z] (EngineCore_DP0 pid=4117) INFO 03-02 09:41:07 [a.py:7] {MSG}",
        # a Markdown quote, also in front of another prefix
        f"> [2026-03-02 09:41:07 TP0] {MSG}",
        f"> 2026-03-02T09:41:07+00:00 [2026-03-02 09:41:07 TP0] {MSG}",
    ],
)
def test_one_line_prefixes_that_need_no_learning(raw: str) -> None:
    """What a single pasted line may carry before its envelope, read without a learned prefix."""
    env = normalise(raw)
    assert env.text == MSG
    assert env.enveloped


def test_a_learned_prefix_is_stripped_and_its_time_kept() -> None:
    lines = [
        f"Mar 02 09:41:{s:02d} gpu-node-07 python3[4117]: [2026-03-02 09:41:{s:02d} TP0] {MSG}"
        for s in range(10)
    ]
    learned = shape.learn(lines, 0.85, known_at)
    assert learned is not None
    bare = "Mar 02 09:41:09 gpu-node-07 python3[4117]:     self.kv_buffer = torch.zeros("
    env = normalise(bare, learned.compiled())
    assert env.text == "    self.kv_buffer = torch.zeros("  # the indentation is the message's
    assert env.ts == "Mar 02 09:41:09"
    assert not env.enveloped
    inner = normalise(lines[3], learned.compiled())
    assert (inner.text, inner.rank, inner.style) == (MSG, "TP0", "sglang")


def test_a_line_the_learned_prefix_does_not_fit_is_left_alone() -> None:
    template = re.compile(r"^[A-Za-z_]+\-\d+ +\|(?: |$)")  # compose's `name-1  | `
    assert normalise("Traceback (most recent call last):", template).text == (
        "Traceback (most recent call last):"
    )


def test_an_unknown_header_before_a_python_record_is_cut() -> None:
    """One line of another logger among known ones: Python's own record start shows where the
    message begins (a traceback's head, an exception line)."""
    env = normalise("2026-03-02 09:41:07 | ERROR | stderr | Traceback (most recent call last):")
    assert env.text == "Traceback (most recent call last):"
    env = normalise("[gpu_worker.py:96] ValueError: Free memory on device (7.1/79.2 GiB) on start")
    assert env.text.startswith("ValueError: Free memory")


def test_a_message_that_quotes_an_exception_is_not_cut() -> None:
    text = "Worker failed with error 'RuntimeError: CUDA error: out of memory'"
    assert normalise(text).text == text


def test_known_envelopes_are_known() -> None:
    assert known_at(f"[2026-03-02 09:41:07 TP0] {MSG}")
    assert known_at("(EngineCore_DP0 pid=4117) x")
    assert known_at("[rank0]: x")
    assert known_at("[gpu_id=0] Load weight begin.")  # sglang-logs.md §10.1
    assert not known_at("sglang-1  | x")
    assert not known_at('  File "/x.py", line 1, in f')


def test_table_rows_are_not_prefixes() -> None:
    row = "|       Allocated memory      |  70.1 GiB  |"
    assert normalise(row).text == row


def test_control_characters_nul_and_byte_order_mark_are_removed() -> None:
    assert normalise("\ufeff[2026-03-02 09:41:07] a\x00b\x07c").text == "abc"


def test_rank_numbers() -> None:
    assert rank_numbers("DP0 TP3 EP3") == {"DP": 0, "TP": 3, "EP": 3}
    assert rank_numbers("DP-1 TP0") == {"DP": -1, "TP": 0}
    assert rank_numbers(None) == {}
