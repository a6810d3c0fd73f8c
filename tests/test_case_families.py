"""Families that replaced case keys: IPython's traceback frames in every rendering, and every
wording vLLM has printed about its multimodal profile. Inputs are written from IPython's
ultratb.py (7.34.0, 8.18.1, 9.18.1) and vLLM's sources, with values of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.extract.signatures import failures, vllm
from oomdoctor.extract.signatures.base import Signature
from oomdoctor.model import Scalar
from tests.conftest import FIXTURES


def _read(signatures: tuple[Signature, ...], kind: str, line: str) -> dict[str, Scalar] | None:
    for sig in signatures:
        if sig.kind != kind or not any(a in line for a in sig.anchors):
            continue
        m = sig.pattern.search(line)
        if m:
            data = sig.build(m)
            if data is not None:
                return dict(data)
    return None


SITE = "~/conda/envs/nb/lib/python3.11/site-packages/vllm/worker/cache_engine.py"


@pytest.mark.parametrize(
    ("line", "path", "lineno", "func"),
    [
        # IPython 8.x / 9.x
        (
            f"File {SITE}:52, in CacheEngine.__init__(self, cache_config)",
            SITE,
            52,
            "CacheEngine.__init__",
        ),
        ("Cell In[7], line 2", "In[7]", 2, "<module>"),
        ("Cell In[12], line 9, in build(name, size)", "In[12]", 9, "build"),
        # JupyterLab / VS Code renderings pasted as Markdown
        (
            f"File [{SITE}:70](http://10.0.0.5:8888/lab/tree/conda/x.py#line=69), in CacheEngine.f(self)",
            SITE,
            70,
            "CacheEngine.f",
        ),
        (f"File [{SITE}:70](file:///home/kim/conda/x.py:70), in f(self)", SITE, 70, "f"),
        (
            "Cell In[5], [line 3](vscode-notebook-cell:?execution_count=5&line=3)",
            "In[5]",
            3,
            "<module>",
        ),
        # IPython 7.x (and 8.x's fallback for very long files): no line number on the frame line
        (
            "<ipython-input-9-1f2e3d4c5b6a> in <module>",
            "<ipython-input-9-1f2e3d4c5b6a>",
            None,
            "<module>",
        ),
        (
            f"{SITE} in _allocate_kv_cache(self, num_blocks, device)",
            SITE,
            None,
            "_allocate_kv_cache",
        ),
        (
            "/tmp/ipykernel_811/2093847561.py in <module>",
            "/tmp/ipykernel_811/2093847561.py",
            None,
            "<module>",
        ),
    ],
)
def test_every_ipython_frame_form_is_a_frame(
    line: str, path: str, lineno: int | None, func: str
) -> None:
    data = _read(failures.SIGNATURES, "frame", line)
    assert data is not None
    assert (data["path"], data.get("lineno"), data["func"]) == (path, lineno, func)


@pytest.mark.parametrize(
    "line",
    [
        "The file /srv/app/main.py in the repo is stale",
        "    61 kv_cache: List[torch.Tensor] = []",
        "---> 64         torch.empty(kv_cache_shape,",
    ],
)
def test_prose_and_source_lines_are_not_frames(line: str) -> None:
    assert _read(failures.SIGNATURES, "frame", line) is None


@pytest.mark.parametrize(
    ("line", "wanted"),
    [
        (
            "INFO 03-02 10:00:01 enc_dec_model_runner.py:277] Starting profile run for multi-modal models.",
            {},
        ),
        (
            "WARNING 03-02 10:00:01 model_runner.py:1278] Computed max_num_seqs (min(128, 4096 // 6404)) "
            "to be less than 1. Setting it to the minimum value of 1.",
            {"seqs_expr": "min(128, 4096 // 6404)"},
        ),
        (
            "WARNING 03-02 10:00:01 processing.py:877] The context length (2048) of the model is too short "
            "to hold the multi-modal embeddings in the worst case (2330 tokens in total, out of which "
            "{'image': 2310} are reserved for multi-modal embeddings).",
            {"seq_len": 2048, "mm_tokens": 2330},
        ),
        (
            "WARNING 03-02 10:00:01 [profiling.py:239] The sequence length used for profiling "
            "(max_num_batched_tokens / max_num_seqs = 64) is too short to hold the multi-modal embeddings "
            "in the worst case (1200 tokens in total, out of which {'audio': 1188} are reserved",
            {"profile_len": 64, "mm_tokens": 1200},
        ),
        (
            "WARNING 03-02 10:00:01 [profiling.py:221] The encoder sequence length used for profiling "
            "(max_num_batched_tokens / max_num_seqs = 64)  is too short to hold the multi-modal embeddings "
            "in the worst case (1500 tokens in total, out of which {'audio': 1500} are reserved",
            {"profile_len": 64, "mm_tokens": 1500},
        ),
        (
            "INFO 03-02 10:00:01 [gpu_model_runner.py:1561] Encoder cache will be initialized with a budget "
            "of 4096 tokens, and profiled with 2 video items of the maximum feature size.",
            {"budget": 4096, "items": 2, "modality": "video"},
        ),
    ],
)
def test_every_mm_profile_wording(line: str, wanted: dict[str, Scalar]) -> None:
    data = _read(vllm.SIGNATURES, "vllm_mm_profile", line)
    assert data is not None
    assert {k: v for k, v in data.items() if v is not None} == wanted


@pytest.mark.parametrize(
    "line",
    [
        "INFO 03-02 10:00:01 [gpu_model_runner.py:2571] Skipping memory profiling for multimodal encoder "
        "and encoder cache.",
        "INFO 03-02 10:00:01 [encoder_cache_manager.py:313] All non-text modalities supported by the model "
        "have been explicitly disabled via limit_mm_per_prompt. Encoder cache will not be initialized.",
    ],
)
def test_no_mm_profile_is_not_a_member(line: str) -> None:
    assert _read(vllm.SIGNATURES, "vllm_mm_profile", line) is None


NOTEBOOKS = {
    "vllm-0.2.7/notebook-ipython7-weights-oom.log": ("weights", "startup_kv_alloc"),
    "vllm-0.6.3/notebook-ipython8-profile-run-oom.log": ("forward", "runtime_activation"),
}


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_a_notebook_paste_from_its_first_frame(name: str, tmp_path: Path, rules: object) -> None:
    """The notebook's traceback without the engine's lines above it still places the failure:
    its frames say where (tests/test_excerpts.py only cuts at plain `File "..."` frames)."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.startswith(("<ipython-input-", "Cell In[")))
    log = tmp_path / "paste.log"
    log.write_text("".join(lines[first:]), encoding="utf-8")
    diag = pipeline.run([str(log)], rules)  # type: ignore[arg-type]
    site, category = NOTEBOOKS[name]
    assert diag.incident.primary is not None
    assert (diag.incident.primary.site, diag.incident.primary.phase) == (site, "startup")
    assert diag.verdict.category == category
