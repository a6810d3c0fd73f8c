"""Account for every byte (issue 20, item 2): who held the card when an allocation failed, and
whether the request could ever fit, decided by elimination from the OOM message's own figures.

One row per message shape, written from PyTorch's templates (../shared/reference/pytorch-oom.md
§5.1, §5.2): the whole modern message, the container form (host PIDs: the server itself is a
`Process N`), the `this process has 0 bytes` form, no process clauses, the 1.x layout, and
messages cut off at each clause. Each row gives the roles the judgement must find, the memory it
must put outside the server, and the fit verdict; the arithmetic is in the row's comment.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from oomdoctor import pipeline
from oomdoctor.judge.oom import OomJudgement

HINT = (
    "If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def modern(
    req: str, total: str, free: str, procs: str, alloc: str, unalloc: str, pools: str = ""
) -> str:
    pool = f"with {pools} allocated in private pools (e.g., CUDA Graphs), " if pools else ""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. GPU 0 has a total "
        f"capacity of {total} of which {free} is free. {procs}Of the allocated memory {alloc} is "
        f"allocated by PyTorch, {pool}and {unalloc} is reserved by PyTorch but unallocated. {HINT}"
    )


def this(gib: str) -> str:
    return f"Including non-PyTorch memory, this process has {gib} memory in use. "


def proc(pid: int, gib: str) -> str:
    return f"Process {pid} has {gib} memory in use. "


class Row(NamedTuple):
    lines: tuple[str, ...]
    roles: dict[int | None, str]  # pid (None: "this process") -> self / foreign / peer / sibling
    self_gib: float | None
    foreign_gib: float
    fit: str
    hidden_at_least: float = 0.0


SGLANG_ARGS = (
    "[2025-10-02 14:02:11] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
    "mem_fraction_static=0.85, tp_size={tp}, chunked_prefill_size=8192)"
)
LOADED = (
    "[2025-10-02 14:02:14] Load weight begin. avail mem=78.50 GB",
    "[2025-10-02 14:02:31] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
    "avail mem=64.20 GB, mem usage=14.30 GB.",
    "[2025-10-02 14:02:40] The server is fired up and ready to roll!",
)

ROWS = {
    # used 79.17 = this process 77.05 + 2.12 free of 79.19: the server alone.
    "this-process-alone": Row(
        (modern("3.50 GiB", "79.19 GiB", "2.12 GiB", this("77.05 GiB"), "71.30 GiB", "4.10 GiB"),),
        {None: "self"},
        77.05,
        0.0,
        "fits",
    ),
    # Container: the lone Process N holds 78.95 of the 78.96 GiB used (79.11 - 152.25 MiB); this
    # process holds at least its allocator's 68.50 + 0.32 = 68.82 GiB, and only 0.01 GiB is
    # outside the listed ones, so N must be this process (its 10.13 GiB above the allocator are
    # graphs, NCCL, context).
    "container-lone-process-is-self": Row(
        (
            modern(
                "792.00 MiB",
                "79.11 GiB",
                "152.25 MiB",
                proc(4188213, "78.95 GiB"),
                "68.50 GiB",
                "331.08 MiB",
                "660.00 MiB",
            ),
        ),
        {4188213: "self"},
        78.95,
        0.0,
        "fits",
    ),
    # Container, two holders: only 51200 (58.98 GiB) holds at least the allocator's
    # 57.81 + 0.63 = 58.44 GiB, and used 79.04 - 58.98 - 20.02 = 0.04 GiB is outside both: 51200
    # is this process, 51877 (20.02 GiB) another one.
    "container-two-processes": Row(
        (
            modern(
                "401.00 MiB",
                "79.15 GiB",
                "110.56 MiB",
                proc(51877, "20.02 GiB") + proc(51200, "58.98 GiB"),
                "57.81 GiB",
                "640.19 MiB",
            ),
        ),
        {51877: "foreign", 51200: "self"},
        58.98,
        20.02,
        "fits",
    ),
    # The message names this process and another: the other one is foreign.
    "this-process-and-another": Row(
        (
            modern(
                "4.34 GiB",
                "94.50 GiB",
                "3.11 GiB",
                proc(60117, "16.20 GiB") + this("75.17 GiB"),
                "68.02 GiB",
                "2.40 GiB",
                "170.00 MiB",
            ),
        ),
        {60117: "foreign", None: "self"},
        75.17,
        16.2,
        "fits",
    ),
    # NVML looked in another PID namespace: 'this process has 0 bytes'. The process holds at
    # least its allocator's 21.02 + 0.55 = 21.57 GiB; used 23.53 - 0.12 = 23.41, so 1.84 GiB
    # is held outside it, less the 2.35 GiB non-PyTorch allowance of a 23.53 GiB card: nothing
    # provably foreign.
    "zero-bytes-other-namespace": Row(
        (
            modern(
                "272.00 MiB", "23.53 GiB", "118.44 MiB", this("0 bytes"), "21.02 GiB", "0.55 GiB"
            ),
        ),
        {None: "self"},
        21.57,
        0.0,
        "fits",
    ),
    # The same, with 14 GiB no one accounts for: 23.41 - 9.10 - 2.35 = 11.96 GiB hidden.
    "zero-bytes-hidden-holder": Row(
        (modern("272.00 MiB", "23.53 GiB", "118.44 MiB", this("0 bytes"), "9.00 GiB", "0.10 GiB"),),
        {None: "self"},
        9.1,
        0.0,
        "fits",
        hidden_at_least=11.9,
    ),
    # The 1.x layout: reserved in total 71.00 GiB is this process; 79.15 - 1.20 - 71.00 = 6.95
    # GiB held by no one the message names; beyond this process's non-PyTorch allowance (a tenth
    # of the card, at most 6 GiB) 0.95 GiB is hidden.
    "legacy-layout": Row(
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
            "capacity; 70.20 GiB already allocated; 1.20 GiB free; 71.00 GiB reserved in total by "
            "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to "
            "avoid fragmentation.  See documentation for Memory Management and "
            "PYTORCH_CUDA_ALLOC_CONF",
        ),
        {None: "self"},
        71.0,
        0.0,
        "fits",
        hidden_at_least=0.9,
    ),
    # Cut after the process clause: no allocator figures. A single holder that accounts for all
    # used memory (79.11 - 0.15 = 78.96 vs 78.95) is the server.
    "cut-after-the-process": Row(
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 792.00 MiB. GPU 0 has a "
            "total capacity of 79.11 GiB of which 152.25 MiB is free. Process 4188213 has 78.95 "
            "GiB memory in use. Of the allocated memory ...",
        ),
        {4188213: "self"},
        78.95,
        0.0,
        "fits",
    ),
    # Cut before any holder: the request and the card only.
    "cut-before-the-holders": Row(
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 330.00 MiB. GPU 0 has a "
            "total capacity of 79.10 GiB of which 212.44 MiB is free.",
        ),
        {},
        None,
        0.0,
        "fits",
    ),
    # One allocation larger than the card: no setting fits it.
    "request-larger-than-the-card": Row(
        (modern("96.00 GiB", "79.19 GiB", "9.81 GiB", this("69.36 GiB"), "68.41 GiB", "0.32 GiB"),),
        {None: "self"},
        69.36,
        0.0,
        "never",
    ),
    # A running server with 14.30 GiB of weights (pre 78.50 - post 64.20) asks for 66.00 GiB:
    # less than the 79.19 GiB card, more than the 64.89 GiB it leaves beside the weights.
    "request-larger-than-the-card-beside-the-weights": Row(
        (
            SGLANG_ARGS.format(tp=1),
            *LOADED,
            modern(
                "66.00 GiB", "79.19 GiB", "9.81 GiB", this("69.36 GiB"), "68.41 GiB", "0.32 GiB"
            ),
        ),
        {None: "self"},
        69.36,
        0.0,
        "not_beside_weights",
    ),
    # TP2: a 0.51 GiB holder is a peer rank's CUDA context, not a co-tenant.
    "tensor-parallel-peer-context": Row(
        (
            SGLANG_ARGS.format(tp=2),
            modern(
                "2.00 GiB",
                "79.19 GiB",
                "1.50 GiB",
                proc(7702, "512.00 MiB") + this("77.15 GiB"),
                "75.80 GiB",
                "0.40 GiB",
            ),
        ),
        {7702: "peer", None: "self"},
        77.15,
        0.0,
        "fits",
    ),
    # vLLM's own worker prefix names the process that printed the OOM: Process 2481 is itself.
    "engine-prefix-names-itself": Row(
        (
            "(Worker_TP0 pid=2481) ERROR 12-03 14:22:53 [multiproc_executor.py:1063] "
            + modern(
                "896.00 MiB",
                "139.80 GiB",
                "346.00 MiB",
                proc(2481, "120.00 GiB") + proc(2602, "19.40 GiB"),
                "118.90 GiB",
                "0.30 GiB",
            ),
        ),
        {2481: "self", 2602: "foreign"},
        120.0,
        19.4,
        "fits",
    ),
}


def _judged(tmp_path: Path, lines: tuple[str, ...]) -> OomJudgement:
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    judgement = pipeline.judge(pipeline.read([str(log)], pipeline.load_rules()))
    assert judgement.oom is not None, "the message was not read as an OOM"
    return judgement.oom


@pytest.mark.parametrize("name", ROWS)
def test_every_byte_is_accounted_for(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    j = _judged(tmp_path, row.lines)
    roles = {h.pid: h.role for h in j.holders.holders}
    assert roles == row.roles, j.holders.holders
    if row.self_gib is None:
        assert j.holders.self_gib is None
    else:
        assert j.holders.self_gib == pytest.approx(row.self_gib, abs=0.01)
    assert j.holders.foreign_gib == pytest.approx(row.foreign_gib, abs=0.01)
    assert j.fit.value == row.fit, j.fit
    if row.hidden_at_least:
        assert (j.holders.hidden_gib or 0.0) >= row.hidden_at_least, j.holders
    for h in j.holders.holders:  # every decision says why, in words a report can show
        assert h.why.strip()


def test_the_elimination_shows_its_arithmetic(tmp_path: Path) -> None:
    j = _judged(tmp_path, ROWS["container-lone-process-is-self"].lines)
    why = next(h.why for h in j.holders.holders if h.pid == 4188213)
    for figure in ("68.82", "0.01", "78.96", "78.95"):
        assert figure in why, why
