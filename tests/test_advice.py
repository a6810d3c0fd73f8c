"""Every advice kind (rules/schema.py ADVICE_KINDS), for every engine it serves, run on real-format
logs through the real pipeline: the values are checked against hand calculations from the log's
own numbers; a log without those numbers gets advice without a value (or text), never an error;
each engine's advice names only its own flags; and advice/registry.py's dispatch (unknown engine,
an allocation larger than the card, SGLang's post-print fraction factor) does what it says.

The short logs are in tests/advice_logs.py (lines copied from the fixtures, numbers changed);
some cases use a whole fixture log. Memory model (DESIGN §2): SGLang's y is a share of the memory
free before loading (pre): KV(y) = post − (1 − y)·pre, dynamic share (1 − y)·pre. vLLM's u is a
share of the GPU's total T for weights + activations + KV: KV(u') = KV(u) + (u' − u)·T.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from oomdoctor import pipeline
from oomdoctor.advice import registry
from oomdoctor.advice.context import Context
from oomdoctor.advice.flags import SGLANG_ONLY, VLLM_ONLY, foreign_flags
from oomdoctor.knowledge import family
from oomdoctor.model import Action, Scalar
from oomdoctor.rules import features
from oomdoctor.rules.schema import ADVICE_KINDS, Rule
from tests import advice_logs
from tests.conftest import FIXTURES

FRACTION_FLAG = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}
FRACTION_SUFFIXES = ("mem-fraction-static", "mem_fraction_static", "gpu-memory-utilization")


class Contexts:
    """Builds (and caches) the advice Context of a log, the way pipeline.diagnose does.

    ``source`` is a name in tests/advice_logs.py (written to a temporary file) or a path under
    fixtures/; ``rule`` names the rule whose remedy text the context carries."""

    def __init__(self, rules: tuple[Rule, ...], folder: Path) -> None:
        self.rules = rules
        self.remedies = {r.id: r.remedy for r in rules}
        self.folder = folder
        self.cache: dict[tuple[str, str | None], Context] = {}

    def path(self, source: str) -> Path:
        if "/" in source:
            return FIXTURES / source
        log = self.folder / f"{source}.log"
        if not log.exists():
            log.write_text(getattr(advice_logs, source), encoding="utf-8")
        return log

    def __call__(self, source: str, rule: str | None = None) -> Context:
        key = (source, rule)
        if key not in self.cache:
            judged = pipeline.judge(pipeline.read([str(self.path(source))], self.rules))
            incident = judged.incident
            feats = features.compute(judged)
            remedy = self.remedies[rule] if rule is not None else None
            self.cache[key] = Context(
                incident, judged.budget, incident.primary, feats, judged.gpu, remedy, judged.oom
            )
        return self.cache[key]


@pytest.fixture(scope="module")
def ctx_of(rules: tuple[Rule, ...], tmp_path_factory: pytest.TempPathFactory) -> Contexts:
    return Contexts(rules, tmp_path_factory.mktemp("advice-logs"))


def _same(got: Scalar, want: Scalar) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return abs(got - want) < 1e-9
    return got == want and type(got) is type(want)


def _generate(kind: str, engine: str, ctx: Context) -> list[Action]:
    actions = registry.generator(kind, engine)(ctx)
    assert isinstance(actions, list)
    assert all(isinstance(a, Action) for a in actions)
    return actions


# -- computed values ------------------------------------------------------------------------


class Want(NamedTuple):
    """What actions[at] must be; ``lead`` is in actions[0].text, ``absent`` in no action's text,
    ``rule`` names the rule whose remedy text the context carries."""

    at: int
    flag: str | None
    direction: str | None
    value: Scalar = None
    current: Scalar = None
    lead: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    rule: str | None = None


def _check(where: str, log: str, want: Want, says: tuple[str, ...], ctx_of: Contexts) -> None:
    """``where`` is `kind/engine`, the engine a registry column: sglang, vllm or any."""
    kind, engine = where.split("/")
    actions = _generate(kind, engine, ctx_of(log, want.rule))
    assert len(actions) > want.at, actions
    a = actions[want.at]
    assert (a.flag, a.direction) == (want.flag, want.direction), a
    assert _same(a.value, want.value), a
    assert _same(a.current, want.current), a
    for bit in says:
        assert bit in a.text, a.text
    for bit in want.lead:
        assert bit in actions[0].text, actions[0].text
    for bit in want.absent:
        assert all(bit not in x.text for x in actions), actions


COMPUTED = [
    # -- raise_mem_fraction ------------------------------------------------------------------
    # y 0.60, pre 70.00, post 20.00: KV empty below y0 = 1 − 20/70 = 0.7143 = y_min (no B/token).
    # y_max: no card within 8% of 70 + 1.35 GiB, so a 71.35 GiB card, < 90 GiB: the 0.4.10–0.5.2
    # table reserves 9.5 + 1/2 = 10.00 GiB -> y_max = (71.35 − 10)/71.35 = 0.8598 (SGLang's own
    # denominator, the card). The one recommendation `plan` shares (budget/recommend.py): the
    # smallest raise, round_up(0.7143 + 0.02) = 0.74 ≤ 0.860.
    # KV(0.74) = 20 − 0.26·70 = 1.80, dynamic 0.26·70 = 18.20 GiB.
    pytest.param(
        "raise_mem_fraction/sglang",
        "SG_STARTUP_KV",
        Want(0, "--mem-fraction-static", "raise", 0.74, 0.6),
        ("1.80 GiB", "18.20 GiB", "1 − 20.00/70.00", "0.714 – 0.860 (today 0.600: outside, below)"),
        id="raise-sglang-smallest-raise",
    ),
    # y 0.75, pre 50.00, post 10.00: y0 = 1 − 10/50 = 0.80. 0.5.10 reserve on a 51.35 GiB card
    # (no common card within 8%): 512 + 1.5·8192 + 1/8·1024 + 2·32 (graph bs 32 below 60 GiB) =
    # 12992 MiB = 12.69 GiB -> y_max = (51.35 − 12.6875)/51.35 = 0.7529 (SGLang's own
    # denominator, the card) < 0.80: empty window. Start just past y_min: round_up(0.80 + 0.01)
    # = 0.81; KV = 10 − 0.19·50 = 0.50, dynamic 9.50 GiB (above the 2 GiB floor), less than the
    # (1 − 0.7529)·50 = 12.35 GiB y_max leaves; then halve chunked prefill 8192 -> 4096.
    pytest.param(
        "raise_mem_fraction/sglang",
        "SG_STARTUP_KV_EMPTY_WINDOW",
        Want(0, "--mem-fraction-static", "raise", 0.81, 0.75),
        ("y ≥ 0.800", "y ≤ 0.753", "0.50 GiB", "only 9.50 GiB", "12.35 GiB that y ≤ 0.753"),
        id="raise-sglang-empty-window",
    ),
    # Omni colocated stage: budget 0.40 × 140.40 GiB < 58.05 GiB held: floor 58.05/140.40 =
    # 0.4135, plus max(2/140.40, 0.02) = 0.02 -> round_up(0.4335) = 0.44.
    pytest.param(
        "raise_mem_fraction/sglang",
        "omni-0.1.9/colocated-no-headroom.log",
        Want(0, "--thinker.gpu_memory_fraction", "raise", 0.44, 0.4),
        ("above 0.413",),
        id="raise-sglang-omni-colocated",
    ),
    # u 0.80, T 79.15, KV −1.16 GiB. B/token: 4 GiB swap / (1638·16) ∈ (163778, 163878] -> 163840
    # (2^15·5); one 8192-token request = 8192·163840 B = 1.25 GiB. u_min = round_up(0.80 +
    # 1.16/79.15 + 1.25/79.15 = 0.8304) = 0.84; target round_up(0.84 + 0.02) = 0.86 (u_max
    # round_down(1 − 2.35/79.15) = 0.97). KV(0.86) = −1.16 + 0.06·79.15 = 3.59 GiB.
    pytest.param(
        "raise_mem_fraction/vllm",
        "VL_STARTUP_NO_KV",
        Want(0, "--gpu-memory-utilization", "raise", 0.86, 0.8),
        ("to 0.86 (today 0.80)", "3.59 GiB", "0.84"),
        id="raise-vllm-u-min",
    ),
    # No total in the log: KV −8.56 GiB at u 0.30; raising u to 0.98 adds 0.68·T, so it needs a
    # card of ≥ 8.56/0.68 = 12.59 -> 13 GiB: the direction, and no value without T.
    pytest.param(
        "raise_mem_fraction/vllm",
        "vllm-0.10.1/startup-no-kv-memory.log",
        Want(0, "--gpu-memory-utilization", "raise", None, 0.3),
        ("≥ 8.56 GiB more", "card of ≥ 13 GiB"),
        id="raise-vllm-no-total",
    ),
    # -- weights_do_not_fit --------------------------------------------------------------------
    # 77.60 GiB allocated by PyTorch when the 77.90 GiB free before loading ran out; TP2 -> 4.
    pytest.param(
        "weights_do_not_fit/sglang",
        "SG_WEIGHTS_OOM",
        Want(
            1,
            "--tp-size",
            "raise",
            4,
            2,
            lead=("77.60 GiB were loaded when 77.90 GiB free ran out",),
        ),
        ("--tp-size 4",),
        id="weights-sglang",
    ),
    pytest.param(
        "weights_do_not_fit/vllm",
        "VL_WEIGHTS_OOM",
        Want(0, None, None),
        ("--tensor-parallel-size (today 2)", "--gpu-memory-utilization only sizes"),
        id="weights-vllm",
    ),
    # -- static_footprint ------------------------------------------------------------------------
    # this process 23.39 of the 23.53 GiB card, 272 MiB asked before the pool: TP2 -> 4.
    pytest.param(
        "static_footprint/sglang",
        "SG_STATIC_OOM",
        Want(
            1,
            "--tp-size",
            "raise",
            4,
            2,
            lead=("held 23.39 GiB of the 23.53 GiB card", "--mem-fraction-static only sizes"),
        ),
        ("--tp-size 4 halves them",),
        id="static-sglang",
    ),
    pytest.param(
        "static_footprint/vllm",
        "VL_STATIC_OOM",
        Want(1, "--tensor-parallel-size", "raise", 4, 2, lead=("when 272.00 MiB more was asked",)),
        ("(today 2)",),
        id="static-vllm",
    ),
    # -- lower_mem_fraction --------------------------------------------------------------------
    # y 0.85, pre 78.00, post 18.00; asked 2.50 GiB with 0.50 free: shortfall 2.00. Dynamic share
    # 0.15·78 = 11.70, margin max(1, 1.17) = 1.17. 0.85 − 3.17/78 = 0.8094 -> round_down 0.80,
    # inside [y_min = 1 − 18/78 + 1.00/78 = 0.7821 (4096 tokens × 262144 B = 1.00 GiB),
    # y_max = 1 − 13.70/78 = 0.8244]. Dynamic at 0.80: 15.60 GiB; KV 18 − 0.2·78 = 2.40 GiB.
    pytest.param(
        "lower_mem_fraction/sglang",
        "SG_RUNTIME_OOM",
        Want(0, "--mem-fraction-static", "lower", 0.8, 0.85),
        ("15.60 GiB instead of 11.70 GiB", "2.40 GiB", "1.17 GiB margin"),
        id="lower-sglang-shortfall",
    ),
    # No sizes in the OOM: one 0.05 step, 0.88 − 0.05 = 0.83 (dynamic (1 − 0.83)·78 = 13.26 GiB
    # instead of (1 − 0.88)·78 = 9.36), below
    # y_max = 1 − 13.125/78 = 0.8317 (0.5.10 reserve 512 + 12288 + 128 + 512 MiB on the guessed
    # H100 80 GB). KV(0.83) = 18 − 0.17·78 = 4.74 GiB.
    pytest.param(
        "lower_mem_fraction/sglang",
        "SG_RUNTIME_OOM_NO_SIZES",
        Want(0, "--mem-fraction-static", "lower", 0.83, 0.88),
        ("one step of about 0.05", "13.26 GiB instead of 9.36 GiB", "4.74 GiB"),
        id="lower-sglang-blind-step",
    ),
    # Asked 10.50 with 0.50 free: 0.85 − 11.17/78 = 0.7068 -> 0.70, below the KV floor y_min
    # 0.7821 -> round_up 0.79: KV(0.79) = 18 − 0.21·78 = 1.62 GiB, dynamic 16.38 GiB.
    pytest.param(
        "lower_mem_fraction/sglang",
        "SG_RUNTIME_OOM_FLOOR",
        Want(0, "--mem-fraction-static", "lower", 0.79, 0.85),
        ("KV floor (0.782)", "1.62 GiB", "16.38 GiB"),
        id="lower-sglang-kv-floor",
    ),
    # u 0.90, T 79.19; asked 1.00 GiB with 256 MiB = 0.25 free: u_max = round_down(0.90 −
    # (0.75 + 1)/79.19 = 0.8779) = 0.87 ≥ u_min 0.48. Freed (0.90 − 0.87)·79.19 = 2.38 GiB;
    # KV 50.00 − 2.38 = 47.62 GiB.
    pytest.param(
        "lower_mem_fraction/vllm",
        "VL_RUNTIME_OOM",
        Want(0, "--gpu-memory-utilization", "lower", 0.87, 0.9),
        ("2.38 GiB more", "47.62 GiB"),
        id="lower-vllm-shortfall",
    ),
    # Start-up check: 30.50 of 79.19 GiB free -> round_down(30.50/79.19 = 0.3851) = 0.38; the KV
    # cache loses (0.90 − 0.38)·79.19 = 41.18 GiB.
    pytest.param(
        "lower_mem_fraction/vllm",
        "VL_STARTUP_FREE",
        Want(0, "--gpu-memory-utilization", "lower", 0.38, 0.9),
        ("0.38 × 79.19 = 30.09 ≤ 30.50", "loses 41.18 GiB"),
        id="lower-vllm-startup-check",
    ),
    # -- graph_capture -------------------------------------------------------------------------
    # y 0.96, pre 78.29; 118.00 − 86.56 MiB = 31.44 MiB short; dynamic 0.04·78.29 = 3.13 ->
    # margin 1.00; 0.96 − 1.0307/78.29 = 0.9468 -> 0.94 (y_max 1 − 3.1623/78.29 = 0.9596).
    pytest.param(
        "graph_capture/sglang",
        "sglang-0.5.2/graph-capture-oom.log",
        Want(0, "--mem-fraction-static", "lower", 0.94, 0.96),
        ("4.70 GiB instead of 3.13 GiB",),
        id="graph-sglang-fraction",
    ),
    # The capture ran out at bs=400: 400 // 2 = 200 (today's max 512 from server_args).
    pytest.param(
        "graph_capture/sglang",
        "sglang-0.5.2/graph-capture-oom.log",
        Want(1, "--cuda-graph-max-bs", "lower", 200, 512),
        ("bs=400",),
        id="graph-sglang-batch",
    ),
    # 0.5.23 renamed the knob: ran out at bs=416 -> 208 on --cuda-graph-max-bs-decode.
    pytest.param(
        "graph_capture/sglang",
        "sglang-0.5.23/graph-capture-oom-decode.log",
        Want(1, "--cuda-graph-max-bs-decode", "lower", 208, 512),
        ("bs=416",),
        id="graph-sglang-0523-flag",
    ),
    # One GRAPH_STEP: round_down(0.90 − 0.03) = 0.87.
    pytest.param(
        "graph_capture/vllm",
        "VL_RUNTIME_OOM",
        Want(0, "--gpu-memory-utilization", "lower", 0.87, 0.9),
        ("--enforce-eager",),
        id="graph-vllm",
    ),
    # -- free_gpu ------------------------------------------------------------------------------
    # Process 99123 holds 20.00 GiB: it costs the pool y·held = 0.85·20.00 = 17.00 GiB; if it
    # stays, the same 2.00 GiB shortfall as SG_RUNTIME_OOM: 0.80.
    pytest.param(
        "free_gpu/sglang",
        "SG_COTENANT_OOM",
        Want(
            1,
            "--mem-fraction-static",
            "lower",
            0.8,
            0.85,
            lead=("Process 99123 holds 20.00 GiB", "17.00 GiB (y × held = 0.85 × 20.00)"),
        ),
        ("If the other process must stay",),
        id="free-sglang-holder",
    ),
    # TP imbalance: 77.89 − 56.12 = 21.77 GiB less; 0.856 × 21.77 = 18.63 GiB of KV per GPU.
    # No allocation size: blind step round_down(0.856 − 0.05 = 0.806) = 0.80.
    pytest.param(
        "free_gpu/sglang",
        "sglang-0.5.2/tp-imbalance-valueerror.log",
        Want(
            1,
            "--mem-fraction-static",
            "lower",
            0.8,
            0.856,
            lead=("21.77 GiB less free memory", "≈18.63 GiB of KV per GPU"),
        ),
        (),
        id="free-sglang-imbalance",
    ),
    # Start-up check: 79.19 − 30.50 = 48.69 GiB held by another process; u ≤ 0.38 fits.
    pytest.param(
        "free_gpu/vllm",
        "VL_STARTUP_FREE",
        Want(
            1,
            "--gpu-memory-utilization",
            "lower",
            0.38,
            0.9,
            lead=("≈48.69 GiB", "30.50 of 79.19 GiB free"),
        ),
        ("If it must stay",),
        id="free-vllm-startup-check",
    ),
    # Process 4711 holds 12.00 GiB; if it stays, VL_RUNTIME_OOM's 0.87.
    pytest.param(
        "free_gpu/vllm",
        "VL_COTENANT_OOM",
        Want(
            1,
            "--gpu-memory-utilization",
            "lower",
            0.87,
            0.9,
            lead=("Process 4711 holds 12.00 GiB",),
        ),
        ("If the other process must stay",),
        id="free-vllm-holder",
    ),
    # -- reserve_encoder -----------------------------------------------------------------------
    # y 0.90, pre 78.36: 3.34 − 2.33 = 1.01 short; dynamic 7.84 -> margin 1.00;
    # 0.90 − 2.01/78.36 = 0.8743 -> 0.87 (y_max 1 − (7.836 + 1.01)/78.36 = 0.8871).
    pytest.param(
        "reserve_encoder/sglang",
        "sglang-0.5.10/vlm-vit-oom.log",
        Want(0, "--mem-fraction-static", "lower", 0.87, 0.9),
        ("vision/audio encoder",),
        id="encoder-sglang",
    ),
    # Omni thinker, y 0.85, pre 134.62: 0.8867 − 0.46 = 0.4267 short; dynamic 0.15·134.62 =
    # 20.19 -> margin 2.02; 0.85 − 2.446/134.62 = 0.8318 -> 0.83.
    pytest.param(
        "reserve_encoder/sglang",
        "omni-0.1.9/omni-image-encoder-oom.log",
        Want(0, "--thinker.engine.mem_fraction_static", "lower", 0.83, 0.85),
        ("2.02 GiB margin",),
        id="encoder-sglang-omni",
    ),
    # Profile run: max_pixels 51,380,224 > 1,003,520 (1280·28·28); max_num_batched_tokens 2048/2.
    pytest.param(
        "reserve_encoder/vllm",
        "vllm-0.10.1/multimodal-profile-oom.log",
        Want(1, "--max-num-batched-tokens", "lower", 1024, 2048, lead=("today 51,380,224",)),
        (),
        id="encoder-vllm-profile",
    ),
    # V0 encoder-decoder profile: max_num_seqs 150 > 16 -> 16.
    pytest.param(
        "reserve_encoder/vllm",
        "vllm-0.6.4/mllama-profile-run-oom.log",
        Want(0, "--max-num-seqs", "lower", 16, 150),
        ("(today 150)",),
        id="encoder-vllm-enc-dec",
    ),
    # -- kv_slots ------------------------------------------------------------------------------
    # 52 slots needed, 17 free: halve max_running_requests 64 -> 32.
    pytest.param(
        "kv_slots/sglang",
        "SG_KV_SLOTS",
        Want(
            1, "--max-running-requests", "lower", 32, 64, lead=("52 tokens needed, 17 available",)
        ),
        ("64 → 32",),
        id="kv-slots-sglang",
    ),
    # 16 asked with 4096 free (available ≥ needed): the allocator bug, not a full pool.
    pytest.param(
        "kv_slots/sglang",
        "SG_KV_SLOTS_ALLOCATOR_BUG",
        Want(0, None, None),
        ("16 tokens while 4096 were available", "PR #4913"),
        id="kv-slots-sglang-allocator-bug",
    ),
    # kvcached: 30 pages needed, 5 free; halve max_num_seqs 96 -> 48.
    pytest.param(
        "kv_slots/vllm",
        "VL_KV_SLOTS",
        Want(1, "--max-num-seqs", "lower", 48, 96, lead=("30 needed, 5 free", "kvcached")),
        ("96 → 48",),
        id="kv-slots-vllm",
    ),
    # -- retraction ----------------------------------------------------------------------------
    # 24 retractions (≥ 20: frequent): --schedule-conservativeness 1.0 -> 1.3.
    pytest.param(
        "retraction/sglang",
        "SG_RETRACTION",
        Want(1, "--schedule-conservativeness", "raise", 1.3, 1.0, lead=("24 time(s)",)),
        (),
        id="retraction-sglang-conservativeness",
    ),
    # max_running_requests 64 · 3/4 = 48.
    pytest.param(
        "retraction/sglang",
        "SG_RETRACTION",
        Want(2, "--max-running-requests", "lower", 48, 64),
        (),
        id="retraction-sglang-running",
    ),
    # Grow into the headroom: 10.62 GiB free after startup, keep max(2, 10.62/2) = 5.31;
    # Δy = round_down(min(0.10, 5.31/78 = 0.0681)) = 0.06 -> 0.91, +0.06·78 = 4.68 GiB of KV,
    # 4.68·2^30/262144 = 19169 tokens.
    pytest.param(
        "retraction/sglang",
        "SG_RETRACTION",
        Want(4, "--mem-fraction-static", "raise", 0.91, 0.85),
        ("+4.68 GiB", "+19,169 tokens"),
        id="retraction-sglang-grow",
    ),
    pytest.param(
        "retraction/vllm",
        "VL_PREEMPTION",
        Want(0, None, None),
        ("(today 0.92)",),
        id="retraction-vllm",
    ),
    # -- host_memory, gpu_fault (any) ------------------------------------------------------------
    pytest.param(
        "host_memory/any",
        "sglang-0.5.10/host-oom-killer.log",
        Want(0, None, None),
        ("(exit −9)", "--mem-fraction-static does not help"),
        id="host-sglang",
    ),
    pytest.param(
        "host_memory/any",
        "vllm-0.10.2/host-sigkill-137.log",
        Want(0, None, None),
        ("(exit −9)", "--gpu-memory-utilization does not help"),
        id="host-vllm",
    ),
    pytest.param(
        "gpu_fault/any",
        "sglang-0.5.23/illegal-memory-access.log",
        Want(0, None, None),
        ("a GPU fault", "--mem-fraction-static does not help"),
        id="fault-sglang",
    ),
    # SGLang 0.4.6–0.5.2 (≤ 0.5.10): the flag that skips capture is --disable-cuda-graph.
    pytest.param(
        "gpu_fault/any",
        "sglang-0.5.2/graph-capture-non-oom.log",
        Want(0, None, None),
        ("no kernel image", "--disable-cuda-graph"),
        id="fault-sglang-capture",
    ),
    pytest.param(
        "gpu_fault/any",
        "VL_GPU_FAULT",
        Want(0, None, None),
        ("a GPU fault", "--gpu-memory-utilization does not help"),
        id="fault-vllm",
    ),
    # -- thinker_kv, omni_placement (any) --------------------------------------------------------
    # 40168 − 36983 = 3185 tokens × 98304 B = 0.29 GiB; round_up(0.80 + 0.2916/75.57 + 0.01 =
    # 0.8139) = 0.82.
    pytest.param(
        "thinker_kv/any",
        "omni-0.1.9/thinker-kv-reject.log",
        Want(0, "--thinker.engine.mem_fraction_static", "raise", 0.82, 0.8),
        ("3,185 tokens × 98,304 B = 0.29 GiB",),
        id="thinker-kv",
    ),
    pytest.param(
        "omni_placement/any",
        "OMNI_PLACEMENT",
        Want(0, None, None),
        ("GPU 1 declare 1.150", "limit 0.950", "at most 0.950"),
        id="omni-placement",
    ),
    # -- remedy (any) ----------------------------------------------------------------------------
    pytest.param(
        "remedy/any",
        "sglang-0.5.10/tokenizer-class-missing.log",
        Want(0, None, None, rule="not-a-memory-error"),
        ("The failure is `ValueError: Tokenizer class Qwen2Tokenizer", "not memory. Fix "),
        id="remedy-sglang-exception",
    ),
    pytest.param(
        "remedy/any",
        "rl-colocation/tms-invalid-argument.log",
        Want(0, None, None, rule="tms-not-memory"),
        ("A parameter out of range (size, granularity, address): not memory. Check ",),
        id="remedy-sglang-meaning",
    ),
    pytest.param(
        "remedy/any",
        "vllm-0.10.2/driver-too-old.log",
        Want(0, None, None, rule="driver-error"),
        ("Install a driver that supports the wheel's CUDA version",),
        id="remedy-vllm",
    ),
    # -- oversized (any) -------------------------------------------------------------------------
    # 120.00 GiB asked on a 79.19 GiB card: no fraction; shorten what sized it. Today's context
    # length is the summary line's context_len=4096 (server_args has none).
    pytest.param(
        "oversized/any",
        "SG_OVERSIZED_OOM",
        Want(
            1,
            "--context-length",
            "lower",
            None,
            4096,
            lead=("No value of --mem-fraction-static", "120.00 GiB", "79.19 GiB card"),
        ),
        (),
        id="oversized-sglang",
    ),
    pytest.param(
        "oversized/any",
        "VL_OVERSIZED_OOM",
        Want(
            1,
            "--max-model-len",
            "lower",
            None,
            131072,  # vLLM's own `Using max model len 131072` line (no --max-model-len given)
            lead=("No value of --gpu-memory-utilization", "120.00 GiB", "79.19 GiB card"),
        ),
        (),
        id="oversized-vllm",
    ),
]


@pytest.mark.parametrize(("where", "log", "want", "says"), COMPUTED)
def test_the_value_is_the_hand_calculation(
    where: str, log: str, want: Want, says: tuple[str, ...], ctx_of: Contexts
) -> None:
    _check(where, log, want, says, ctx_of)


# -- degraded: the log lacks the numbers ---------------------------------------------------


DEGRADED = [
    pytest.param(
        "raise_mem_fraction/sglang",
        "SG_STARTUP_KV_BARE",
        Want(0, "--mem-fraction-static", "raise", absent=("today",)),
        ("cannot be computed",),
        id="raise-sglang",
    ),
    pytest.param(
        "raise_mem_fraction/vllm",
        "VL_STARTUP_NO_KV_BARE",
        Want(0, "--gpu-memory-utilization", "raise", absent=("today",)),
        ("vLLM's default is 0.9",),
        id="raise-vllm",
    ),
    pytest.param(
        "weights_do_not_fit/sglang",
        "SG_WEIGHTS_OOM_BARE",
        Want(0, None, None),
        ("The weights themselves do not fit",),
        id="weights-sglang",
    ),
    pytest.param(
        "weights_do_not_fit/vllm",
        "VL_WEIGHTS_OOM_BARE",
        Want(0, None, None, absent=("today",)),
        ("raise --tensor-parallel-size,",),
        id="weights-vllm",
    ),
    pytest.param(
        "static_footprint/sglang",
        "sglang-0.5.2/startup-oom-message-only.log",
        Want(1, "--tp-size", "raise", absent=("today's --tp-size 1",)),
        ("twice today's --tp-size",),
        id="static-sglang",
    ),
    pytest.param(
        "static_footprint/vllm",
        "VL_STATIC_OOM_BARE",
        Want(1, "--tensor-parallel-size", "raise", absent=("today",)),
        ("raise --tensor-parallel-size.",),
        id="static-vllm",
    ),
    # The OOM's own numbers survive: 2.00 GiB short + the 1 GiB minimum margin = 3.00 GiB.
    pytest.param(
        "lower_mem_fraction/sglang",
        "SG_RUNTIME_OOM_BARE",
        Want(0, "--mem-fraction-static", "lower", absent=("today",)),
        ("at least 3.00 GiB more", "cannot be computed"),
        id="lower-sglang-sizes-only",
    ),
    pytest.param(
        "lower_mem_fraction/sglang",
        "SG_RUNTIME_OOM_NOTHING",
        Want(0, "--mem-fraction-static", "lower", absent=("at least", "today")),
        ("cannot be computed",),
        id="lower-sglang-nothing",
    ),
    # 1.00 GiB asked, 0.25 free: 0.75 GiB short.
    pytest.param(
        "lower_mem_fraction/vllm",
        "VL_RUNTIME_OOM_BARE",
        Want(0, "--gpu-memory-utilization", "lower"),
        ("at least 0.75 GiB more", "does not show today's value"),
        id="lower-vllm",
    ),
    # 118.00 − 86.56 MiB = 0.03 GiB short + 1 GiB margin = 1.03 GiB.
    pytest.param(
        "graph_capture/sglang",
        "SG_GRAPH_CAPTURE_BARE",
        Want(0, "--mem-fraction-static", "lower"),
        ("at least 1.03 GiB more",),
        id="graph-sglang-fraction",
    ),
    # No capture progress and no max bs: SGLang's own example, 16.
    pytest.param(
        "graph_capture/sglang",
        "SG_GRAPH_CAPTURE_BARE",
        Want(1, "--cuda-graph-max-bs", "lower", value=16),
        ("e.g. 16 as SGLang suggests",),
        id="graph-sglang-batch",
    ),
    pytest.param(
        "graph_capture/vllm",
        "VL_RUNTIME_OOM_BARE",
        Want(0, "--gpu-memory-utilization", "lower"),
        (),
        id="graph-vllm",
    ),
    pytest.param(
        "free_gpu/sglang",
        "SG_RUNTIME_OOM_NOTHING",
        Want(0, None, None),
        ("Another process holds memory on this server's GPUs",),
        id="free-sglang",
    ),
    pytest.param(
        "free_gpu/vllm",
        "VL_RUNTIME_OOM_BARE",
        Want(0, None, None),
        ("Another process holds memory on this GPU",),
        id="free-vllm-text",
    ),
    pytest.param(
        "free_gpu/vllm",
        "VL_RUNTIME_OOM_BARE",
        Want(1, "--gpu-memory-utilization", "lower"),
        ("If the other process must stay",),
        id="free-vllm-fraction",
    ),
    # 1.00 − 0.44 = 0.56 short + 1 GiB margin = 1.56 GiB.
    pytest.param(
        "reserve_encoder/sglang",
        "sglang-0.5.10/gemma3-siglip-oom-kubectl.log",
        Want(0, "--mem-fraction-static", "lower"),
        ("at least 1.56 GiB more",),
        id="encoder-sglang",
    ),
    # 0.44 − 0.06 = 0.38 GiB short; no u in the log.
    pytest.param(
        "reserve_encoder/vllm",
        "vllm-0.10.2/v1-mm-encoder-oom-headerless.log",
        Want(2, "--gpu-memory-utilization", "lower"),
        ("at least 0.38 GiB more",),
        id="encoder-vllm",
    ),
    pytest.param(
        "kv_slots/sglang",
        "SG_KV_SLOTS_BARE",
        Want(0, None, None, absent=("--max-running-requests", "needed")),
        ("ran out of token slots",),
        id="kv-slots-sglang",
    ),
    # No max_num_seqs in the log: the action names vLLM's example, 128, and no current value.
    pytest.param(
        "kv_slots/vllm",
        "VL_KV_SLOTS_BARE",
        Want(1, "--max-num-seqs", "lower", value=128),
        ("e.g. 128",),
        id="kv-slots-vllm",
    ),
    pytest.param(
        "retraction/sglang",
        "SG_RETRACTION_BARE",
        Want(
            1, "--schedule-conservativeness", "raise", value=1.3, absent=("--max-running-requests",)
        ),
        ("default 1.0",),
        id="retraction-sglang",
    ),
    pytest.param(
        "retraction/vllm",
        "VL_PREEMPTION_BARE",
        Want(0, None, None, absent=("today",)),
        ("raise --gpu-memory-utilization,",),
        id="retraction-vllm",
    ),
    pytest.param(
        "host_memory/any",
        "VL_HOST_KILL_BARE",
        Want(0, None, None),
        ("--mem-fraction-static (SGLang) / --gpu-memory-utilization (vLLM) does not help",),
        id="host-unknown-engine",
    ),
    pytest.param(
        "gpu_fault/any",
        "sglang-0.5.23/healthy-startup.log",
        Want(0, None, None),
        ("Not memory exhaustion: a GPU fault",),
        id="fault-no-failure",
    ),
    pytest.param(
        "thinker_kv/any",
        "OMNI_REJECT_BARE",
        Want(0, "--thinker.engine.mem_fraction_static", "raise", current=0.8),
        ("holds 20,000 tokens", "needed 34,096"),
        id="thinker-kv",
    ),
    pytest.param(
        "omni_placement/any",
        "OMNI_PLACEMENT_CAPACITY",
        Want(0, None, None, absent=("limit",)),
        ("declare more memory than the card has",),
        id="omni-placement",
    ),
    pytest.param(
        "remedy/any",
        "sglang-0.5.10/tokenizer-class-missing.log",
        Want(0, None, None),
        ("See the rule's explanation.",),
        id="remedy-no-text",
    ),
    pytest.param(
        "oversized/any",
        "SG_KV_SLOTS_BARE",
        Want(0, None, None),
        ("No value of --mem-fraction-static can fit this",),
        id="oversized-no-oom",
    ),
]


@pytest.mark.parametrize(("where", "log", "want", "says"), DEGRADED)
def test_without_the_numbers_it_degrades(
    where: str, log: str, want: Want, says: tuple[str, ...], ctx_of: Contexts
) -> None:
    _check(where, log, want, says, ctx_of)


def test_every_kind_and_engine_has_both_cases() -> None:
    computed = {str(p.values[0]) for p in COMPUTED}
    degraded = {str(p.values[0]) for p in DEGRADED}
    served = {f"{k}/{e}" for k, entry in registry.REGISTRY.items() for e in entry if k != "none"}
    assert set(ADVICE_KINDS) == {w.split("/")[0] for w in served} | {"none"}
    assert served - computed == set()
    assert served - degraded == set()


@pytest.mark.parametrize(
    "log", ["SG_RUNTIME_OOM", "VL_RUNTIME_OOM", "UNKNOWN_ENGINE_OOM", "SG_STARTUP_KV_BARE"]
)
def test_none_gives_no_action(log: str, ctx_of: Contexts) -> None:
    ctx = ctx_of(log)
    assert _generate("none", "any", ctx) == []
    assert registry.actions("none", ctx) == ()
    assert registry.actions(None, ctx) == ()


# -- bugs found ----------------------------------------------------------------------------


def test_preemptions_are_counted_as_vllm_counts_them(ctx_of: Contexts) -> None:
    (action,) = _generate("retraction", "vllm", ctx_of("VL_PREEMPTION"))
    m = re.search(r"preempted requests (\d+) time", action.text)
    assert m is not None, action.text
    assert int(m.group(1)) >= 51, action.text


def test_weights_advice_does_not_call_the_card_free(ctx_of: Contexts) -> None:
    head = _generate("weights_do_not_fit", "sglang", ctx_of("SG_WEIGHTS_OOM_BARE"))[0]
    assert "79.19 GiB free" not in head.text, head.text


def test_weights_advice_does_not_guess_the_tp_size(ctx_of: Contexts) -> None:
    actions = _generate("weights_do_not_fit", "sglang", ctx_of("SG_WEIGHTS_OOM_BARE"))
    tp = next(a for a in actions if a.flag == "--tp-size")
    assert tp.current is None, tp


# -- nothing raises, whatever the log ------------------------------------------------------

ALL_LOGS = sorted(n for n in dir(advice_logs) if n.isupper() and not n.startswith("_"))


@pytest.mark.parametrize("kind", list(ADVICE_KINDS))
def test_no_generator_raises_on_any_log(kind: str, ctx_of: Contexts) -> None:
    ran = 0
    for log in ALL_LOGS:
        ctx = ctx_of(log)
        for engine in ("sglang", "vllm"):
            _generate(kind, engine, ctx)
            ran += 1
        assert all(isinstance(a, Action) for a in registry.actions(kind, ctx))
    assert ran == 2 * len(ALL_LOGS) > 40


# -- engine terms --------------------------------------------------------------------------

SGLANG_LOGS = [
    "SG_STARTUP_KV",
    "SG_STARTUP_KV_EMPTY_WINDOW",
    "SG_RUNTIME_OOM",
    "SG_RUNTIME_OOM_BARE",
    "SG_COTENANT_OOM",
    "SG_WEIGHTS_OOM",
    "SG_KV_SLOTS",
    "SG_RETRACTION",
    "SG_OVERSIZED_OOM",
    "sglang-0.5.2/graph-capture-oom.log",
    "sglang-0.5.10/vlm-vit-oom.log",
    "sglang-0.5.2/tp-imbalance-valueerror.log",
    "omni-0.1.9/thinker-kv-reject.log",
]
VLLM_LOGS = [
    "VL_STARTUP_NO_KV",
    "VL_STARTUP_NO_KV_BARE",
    "VL_RUNTIME_OOM",
    "VL_RUNTIME_OOM_BARE",
    "VL_COTENANT_OOM",
    "VL_STARTUP_FREE",
    "VL_WEIGHTS_OOM",
    "VL_KV_SLOTS",
    "VL_PREEMPTION",
    "VL_OVERSIZED_OOM",
    "vllm-0.10.1/multimodal-profile-oom.log",
    "vllm-0.6.4/mllama-profile-run-oom.log",
]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("kind", list(ADVICE_KINDS))
def test_advice_names_only_the_logs_engines_flags(kind: str, engine: str, ctx_of: Contexts) -> None:
    wrong = []
    flagged = 0
    for log in SGLANG_LOGS if engine == "sglang" else VLLM_LOGS:
        ctx = ctx_of(log)
        assert family(ctx.incident.engine) == engine, log
        for a in registry.actions(kind, ctx):
            flagged += a.flag is not None
            found = foreign_flags(engine, a.flag or "") + foreign_flags(engine, a.text)
            if found:
                wrong.append((log, found, a.text))
    assert wrong == []
    if kind in ("raise_mem_fraction", "lower_mem_fraction", "free_gpu", "kv_slots"):
        assert flagged > 0  # the check looked at real flags


@pytest.mark.parametrize(
    ("log", "engine", "other"),
    [("SG_RUNTIME_OOM", "sglang", "vllm"), ("VL_RUNTIME_OOM", "vllm", "sglang")],
)
def test_the_foreign_flag_check_catches_the_other_engines_advice(
    log: str, engine: str, other: str, ctx_of: Contexts
) -> None:
    """Give a log the other engine's generator: its flags are caught (the check has teeth)."""
    actions = _generate("lower_mem_fraction", other, ctx_of(log))
    found = {f for a in actions for f in foreign_flags(engine, f"{a.flag or ''} {a.text}")}
    assert FRACTION_FLAG[other] in found
    assert found <= set(VLLM_ONLY if engine == "sglang" else SGLANG_ONLY)


# -- registry.actions ----------------------------------------------------------------------

NOTE = "The log does not show whether SGLang or vLLM wrote it"


def test_unknown_engine_labels_both_engines_after_a_note(ctx_of: Contexts) -> None:
    ctx = ctx_of("UNKNOWN_ENGINE_OOM")
    assert family(ctx.incident.engine) is None
    out = registry.actions("lower_mem_fraction", ctx)
    assert out[0].text.startswith(NOTE) and out[0].flag is None
    labels = [a.text.split(": ", 1)[0] for a in out[1:]]
    assert labels == sorted(labels, key=["SGLang", "vLLM"].index)  # SGLang's first, then vLLM's
    assert {"SGLang", "vLLM"} == set(labels)
    sglang = [a for a in out[1:] if a.text.startswith("SGLang: ")]
    vllm = [a for a in out[1:] if a.text.startswith("vLLM: ")]
    assert all(not foreign_flags("sglang", f"{a.flag or ''} {a.text}") for a in sglang)
    assert all(not foreign_flags("vllm", f"{a.flag or ''} {a.text}") for a in vllm)
    # Same OOM for both: 2.50 − 0.50 = 2.00 GiB short; SGLang adds its 1 GiB minimum margin.
    assert (sglang[0].flag, sglang[0].direction, sglang[0].value) == (
        "--mem-fraction-static",
        "lower",
        None,
    )
    assert "at least 3.00 GiB more" in sglang[0].text
    assert (vllm[0].flag, vllm[0].direction, vllm[0].value) == (
        "--gpu-memory-utilization",
        "lower",
        None,
    )
    assert "at least 2.00 GiB more" in vllm[0].text


@pytest.mark.parametrize("kind", list(ADVICE_KINDS))
def test_unknown_engine_every_action_after_the_note_is_labelled(
    kind: str, ctx_of: Contexts
) -> None:
    out = registry.actions(kind, ctx_of("UNKNOWN_ENGINE_OOM"))
    if not out or not out[0].text.startswith(NOTE):
        # no note: engine-neutral advice, which changes no engine's flag and names each engine
        # whose flag it mentions ("--mem-fraction-static (SGLang) / ... (vLLM) does not help")
        for a in out:
            assert not a.text.startswith(("SGLang: ", "vLLM: ")), a
            assert a.flag is None or a.flag not in (*SGLANG_ONLY, *VLLM_ONLY), a
            if foreign_flags("vllm", a.text):  # SGLang's flags are named
                assert "SGLang" in a.text, a
            if foreign_flags("sglang", a.text):  # vLLM's flags are named
                assert "vLLM" in a.text, a
        return
    shared = [a for a in out[1:] if not a.text.startswith(("SGLang: ", "vLLM: "))]
    assert all(a.flag is None for a in shared), shared  # an unlabelled line names no flag
    for a in out[1:]:
        if a.text.startswith("SGLang: "):
            assert not foreign_flags("sglang", f"{a.flag or ''} {a.text}"), a
        if a.text.startswith("vLLM: "):
            assert not foreign_flags("vllm", f"{a.flag or ''} {a.text}"), a


def test_engine_neutral_advice_is_not_labelled(ctx_of: Contexts) -> None:
    ctx = ctx_of("VL_HOST_KILL_BARE")
    assert family(ctx.incident.engine) is None
    (action,) = registry.actions("host_memory", ctx)
    assert action.text.startswith("Not GPU memory: the host (CPU RAM) ran out")
    assert "(SGLang) / --gpu-memory-utilization (vLLM)" in action.text


SIZED_BY_FRACTION = [
    "lower_mem_fraction",
    "raise_mem_fraction",
    "reserve_encoder",
    "graph_capture",
    "free_gpu",
]


@pytest.mark.parametrize("kind", SIZED_BY_FRACTION)
@pytest.mark.parametrize(
    ("log", "engine", "length"),
    [
        ("SG_OVERSIZED_OOM", "sglang", "--context-length"),
        ("VL_OVERSIZED_OOM", "vllm", "--max-model-len"),
    ],
)
def test_an_allocation_larger_than_the_card_gets_oversized_advice(
    kind: str, log: str, engine: str, length: str, ctx_of: Contexts
) -> None:
    ctx = ctx_of(log)
    # 120.00 GiB asked ≥ the 79.19 GiB total: no fraction can fit it.
    assert ctx.features["oom.exceeds_card"].value is True
    out = registry.actions(kind, ctx)
    assert out[0].text.startswith(
        f"No value of {FRACTION_FLAG[engine]} can fit this: the single allocation of 120.00 GiB "
        "is larger than the whole 79.19 GiB card."
    )
    assert not any((a.flag or "").endswith(FRACTION_SUFFIXES) for a in out), out
    assert (out[1].flag, out[1].direction) == (length, "lower")


@pytest.mark.parametrize("kind", SIZED_BY_FRACTION)
def test_an_allocation_that_fits_the_card_keeps_its_advice(kind: str, ctx_of: Contexts) -> None:
    out = registry.actions(kind, ctx_of("SG_RUNTIME_OOM"))  # 2.50 GiB of a 79.19 GiB card
    assert not out[0].text.startswith("No value of")
    assert any((a.flag or "").endswith(FRACTION_SUFFIXES) for a in out), out


def test_oversized_replaces_only_fraction_advice(ctx_of: Contexts) -> None:
    out = registry.actions("kv_slots", ctx_of("SG_OVERSIZED_OOM"))
    assert not any(a.text.startswith("No value of") for a in out)
    assert out == tuple(_generate("kv_slots", "sglang", ctx_of("SG_OVERSIZED_OOM")))


def test_a_post_print_factor_turns_the_wanted_y_into_the_value_to_pass(ctx_of: Contexts) -> None:
    """SGLang 0.3.6 multiplies a multimodal model's flag by 0.95 after printing it: 0.88 printed,
    0.836 in effect. pre 23.18; 0.5610 − 0.4023 = 0.16 GiB short, dynamic 0.164·23.18 = 3.80 ->
    margin 1.00: wanted y = 0.836 − 1.1587/23.18 = 0.7860 -> 0.78; to pass, 0.78 / 0.95 =
    0.8211 -> 0.821, against today's printed 0.88."""
    ctx = ctx_of("sglang-0.3.6/vlm-llava-oom.log")
    wanted = _generate("reserve_encoder", "sglang", ctx)[0]
    assert (wanted.flag, wanted.direction) == ("--mem-fraction-static", "lower")
    assert _same(wanted.value, 0.78) and _same(wanted.current, 0.836)
    passed = registry.actions("reserve_encoder", ctx)[0]
    assert (passed.flag, passed.direction) == ("--mem-fraction-static", "lower")
    assert _same(passed.value, 0.821) and _same(passed.current, 0.88)
    assert "Pass --mem-fraction-static 0.821: SGLang multiplies the flag by 0.95" in passed.text


@pytest.mark.parametrize("kind", list(ADVICE_KINDS))
def test_a_known_engine_gets_its_own_generator(kind: str, ctx_of: Contexts) -> None:
    for log, engine in (("VL_RUNTIME_OOM", "vllm"), ("SG_RUNTIME_OOM", "sglang")):
        ctx = ctx_of(log)  # no oversized allocation, no post-print factor
        assert registry.actions(kind, ctx) == tuple(_generate(kind, engine, ctx))


def test_any_serves_both_engines_and_an_own_entry_wins() -> None:
    assert registry.generator("host_memory", "vllm") is registry.generator("host_memory", "sglang")
    assert registry.generator("host_memory", "vllm") is registry.REGISTRY["host_memory"]["any"]
    sg, vl = registry.generator("retraction", "sglang"), registry.generator("retraction", "vllm")
    assert sg is not vl
    assert (sg.__name__, vl.__name__) == ("retraction", "preemption")
