"""Reports lead with the fix: verdict, flag diff, why, then numbers; no rows of unknowns, no
internal tags, one meaning per label, the cheapest safe fix first, a row per Omni stage."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES, REAL_LOGS

REAL = sorted(REAL_LOGS.glob("*.log")) if REAL_LOGS.is_dir() else []
LOGS = [*sorted(FIXTURES.rglob("*.log")), *REAL]

#: The tail of an SGLang runtime traceback in the logits processor (frames as Python prints them,
#: the message in PyTorch's current format, pytorch-oom.md §5.1), written for these tests.
FRAMES = (
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/logits_processor.py", '
    "line 329, in forward\n"
    "    logits = self._get_logits(pruned_states, lm_head, logits_metadata)\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/logits_processor.py", '
    "line 478, in _get_logits\n"
    "    logits = torch.matmul(hidden_states.to(lm_head.weight.dtype), lm_head.weight.T)\n"
)


def oom_line(free: str, process: str, by_pytorch: str, unallocated: str) -> str:
    """PyTorch's message for a 4.63 GiB request on a 79.19 GiB card, NVML naming the server
    itself as `Process 21877` (a container), 96.00 MiB in CUDA-graph pools."""
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.63 GiB. GPU 0 has a total "
        f"capacity of 79.19 GiB of which {free} is free. Process 21877 has {process} memory in use. "
        f"Of the allocated memory {by_pytorch} is allocated by PyTorch, with 96.00 MiB allocated in "
        f"private pools (e.g., CUDA Graphs), and {unallocated} is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    )


def report(path: Path, fmt: str = "text") -> str:
    result = CliRunner().invoke(cli, ["diagnose", str(path), "--no-gpu", "--format", fmt])
    assert result.exit_code in (0, 1), result.stderr
    return result.stdout


def test_an_excerpt_of_one_oom_message_fits_a_screen(tmp_path: Path) -> None:
    log = tmp_path / "excerpt.log"
    # 4.63 − 3.87 = 0.76 GiB short (778.24 MiB), less than the 3.12 GiB reserved but unallocated
    log.write_text(FRAMES + oom_line("3.87 GiB", "75.31 GiB", "72.10 GiB", "3.12 GiB"), "utf-8")
    text = report(log)
    lines = text.splitlines()
    assert len(lines) <= 32, text  # with fix 1's label, and the OOM line's numbers kept
    assert not any(line.rstrip().endswith("unknown") for line in lines), text
    # the order: verdict, the diff, numbered actions, why, the OOM message's figures
    order = [
        "runtime_activation",
        "What to change",
        "  + PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "1. First, the cheapest",
        "Why:",
        "What the OOM message says",
        "Evidence",
    ]
    at = [next(i for i, line in enumerate(lines) if line.startswith(want)) for want in order]
    assert at == sorted(at), text
    # the message's figures, as printed (96.00 MiB survives the JSON rounding)
    for figure in ("4.63 GiB", "3.87 GiB", "778.24 MiB", "79.19 GiB", "75.31 GiB", "96.00 MiB"):
        assert figure in text
    # the margin is explained where it is used: 778.24 MiB short + the 1 GiB minimum margin
    assert "at least 1.76 GiB more (778.24 MiB short + 1.00 GiB margin" in " ".join(text.split())


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_rows_of_unknowns_and_no_internal_tags(path: Path) -> None:
    for fmt in ("text", "markdown"):
        out = report(path, fmt)
        assert not re.search(r"\((kv pool|graph capture|forward|logits|sampling|encoder);", out)
        assert "unknown during unknown" not in out and "cuda_oom at" not in out
        rows = [
            line for line in out.splitlines() if re.search(r"\s{2,}unknown$|\| unknown \|$", line)
        ]
        assert rows == [], rows


@pytest.mark.parametrize(
    "path",
    [
        FIXTURES / "sglang-0.5.2" / "worked-example-y070.log",
        FIXTURES / "sglang-0.5.10" / "startup-kv-current-value-tp4-compose.log",
    ],
    ids=lambda p: p.name,
)
def test_text_and_markdown_carry_the_same_flag_diff(path: Path) -> None:
    text = report(path).splitlines()
    diff_text = [line.strip() for line in text if re.match(r"^  [-+] ", line)]
    md = report(path, "markdown")
    block = md.split("```diff\n", 1)[1].split("```", 1)[0]
    assert diff_text and diff_text == block.strip().splitlines()
    data = json.loads(report(path, "json"))
    raised = next(a for a in data["actions"] if a["flag"] == "--mem-fraction-static")
    assert f"+ --mem-fraction-static {raised['value']:.2f}" in diff_text


def test_the_startup_why_agrees_with_sglangs_own_increase_line() -> None:
    text = report(FIXTURES / "sglang-0.5.2" / "worked-example-y070.log")
    flat = " ".join(text.split())
    why = flat.split("Why: ", 1)[1].split(" memory budget", 1)[0].lower()
    assert "Please try to increase" in text  # SGLang's own line, in the evidence
    assert "sglang's own message is right here: raise" in why and "generic" not in why


def test_one_meaning_per_label_when_the_pool_is_negative() -> None:
    """The table's dynamic share is (1 − y)·pre; the card draws what is left after the weights."""
    data = json.loads(report(FIXTURES / "sglang-0.5.2" / "worked-example-y070.log", "json"))
    assert data["budget"]["dynamic_gib"] == pytest.approx(0.30 * 78, abs=0.01)
    parts = {p["key"]: p for p in data["picture"]["before"]["parts"]}
    assert "dynamic" not in parts and parts["left"]["gib"] == pytest.approx(18.0, abs=0.01)
    assert parts["left"]["label"].startswith("left after the weights")
    after = {p["key"]: p for p in data["picture"]["after"]["parts"]}
    y = data["picture"]["after"]["y"]
    assert after["dynamic"]["gib"] == pytest.approx((1 - y) * 78, abs=0.01)


def test_fragmentation_is_not_offered_when_it_does_not_cover_the_gap(tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    # 4.63 − 1.20 = 3.43 GiB short; only 400.00 MiB is reserved but unallocated
    log.write_text(FRAMES + oom_line("1.20 GiB", "77.98 GiB", "77.21 GiB", "400.00 MiB"), "utf-8")
    data = json.loads(report(log, "json"))
    assert data["verdict"]["category"] == "runtime_activation", data["verdict"]["summary"]
    assert data["failure"]["oom"]["requested_gib"] == pytest.approx(4.63, abs=0.005)
    assert not any(a["flag"] == "PYTORCH_CUDA_ALLOC_CONF" for a in data["actions"])


def test_omni_has_a_budget_row_per_stage_and_gpu() -> None:
    text = report(FIXTURES / "omni-0.1.9" / "stage-budgets-two-gpus.log")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:1].isalpha()}
    assert rows["stage"][:3] == ["stage", "GPU", "y"]
    assert rows["thinker"][1:3] == ["0", "0.435"] and "1.92" in rows["thinker"]
    assert rows["talker_ar"][1:3] == ["1", "0.880"] and "116.42" in rows["talker_ar"]
    assert "memory budget (stage thinker, GPU 0)" in text
    md = report(FIXTURES / "omni-0.1.9" / "stage-budgets-two-gpus.log", "markdown")
    assert "| stage | GPU | y | pre | post | weights | KV pool |" in md
    assert "| talker_ar | 1 | 0.880 |" in md  # no escapes a plain-text reader must read past
