"""Where an allocation failed and when, from frames, code lines, wrapper texts and stage names:
the tables generated from the engines' sources (knowledge/code.py), the fallbacks for code no
table knows (judge/heuristics.py), one case per kind of source, plus the user's own marks."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor import knowledge
from oomdoctor.cli import cli
from oomdoctor.judge.place import place
from oomdoctor.model import Failure, Frame, Line

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _frames(*specs: str) -> tuple[Frame, ...]:
    """`path:func`, `path:func@lineno` or `path:func|code` per frame, outermost first."""
    out = []
    for spec in specs:
        probe, _, code = spec.partition("|")
        probe, _, at = probe.partition("@")
        path, _, func = probe.rpartition(":")
        out.append(Frame(path, int(at or 0), func, None, code))
    return tuple(out)


def _line(text: str, number: int = 1) -> Line:
    return Line(source=0, number=number, seq=number << 8, text=text, raw=text)


def _failure(frames: tuple[Frame, ...], texts: tuple[str, ...], stages: tuple[str, ...]) -> Failure:
    """A CUDA OOM with these frames; the first text is its line, the second its traceback's
    wrapper (the opener); the first stage the pipeline stage it ran in."""
    return Failure(
        kind="cuda_oom",
        line=_line(texts[0] if texts else OOM, 10),
        message=texts[0] if texts else OOM,
        frames=frames,
        opener=_line(texts[1], 9) if len(texts) > 1 else None,
        stage=stages[0] if stages else None,
    )


SITE_CASES = [
    ("SGLang weights", _frames("/sglang/srt/model_loader/loader.py:load_model"), (), (), "weights"),
    (
        "SGLang KV pool",
        _frames(
            "/sglang/srt/model_executor/model_runner.py:init_memory_pool",
            "/sglang/srt/mem_cache/memory_pool.py:_create_buffers",
        ),
        (),
        (),
        "kv_pool",
    ),
    (
        "vLLM V0 KV cache (IPython qualified name)",
        _frames("~/envs/x/vllm/worker/cache_engine.py:CacheEngine._allocate_kv_cache"),
        (),
        (),
        "kv_pool",
    ),
    (
        "SGLang graph capture runs a forward",
        _frames(
            "/sglang/srt/model_executor/cuda_graph_runner.py:capture",
            "/sglang/srt/models/llama.py:forward",
            "/sglang/srt/layers/linear.py:forward",
        ),
        (),
        (),
        "graph_capture",
    ),
    (
        "vLLM sleep-mode wake-up",
        _frames(
            "/vllm/v1/worker/gpu_worker.py:wake_up",
            "/vllm/device_allocator/cumem.py:create_and_map",
        ),
        (),
        (),
        "resume",
    ),
    (
        "SGLang VLM embedding",
        _frames(
            "/sglang/srt/managers/mm_utils.py:general_mm_embed_routine",
            "/sglang/srt/managers/mm_utils.py:embed_mm_inputs",
            "/sglang/srt/models/qwen2_5_vl.py:get_image_feature",
        ),
        (),
        (),
        "encoder",
    ),
    (
        "vLLM V1 encoder runner",
        _frames(
            "/vllm/v1/worker/gpu_model_runner.py:execute_model",
            "/vllm/v1/worker/gpu_model_runner.py:_execute_mm_encoder",
        ),
        (),
        (),
        "encoder",
    ),
    (
        "the code line under a frame",
        _frames(
            "/vllm/model_executor/models/minicpmv.py:get_embedding|vision_embedding = self.vpm("
        ),
        (),
        (),
        "encoder",
    ),
    (
        "transformers SigLIP",
        _frames("/site-packages/transformers/models/siglip/modeling_siglip.py:forward"),
        (),
        (),
        "encoder",
    ),
    ("logits", _frames("/sglang/srt/layers/logits_processor.py:_get_logits"), (), (), "logits"),
    (
        "vLLM sampler",
        _frames("/vllm/v1/sample/ops/topk_topp_sampler.py:forward_native"),
        (),
        (),
        "sampling",
    ),
    (
        "NCCL communicator",
        _frames("/sglang/srt/distributed/device_communicators/pynccl.py:__init__"),
        (),
        (),
        "comm",
    ),
    (
        "SGLang prefill forward",
        _frames(
            "/sglang/srt/managers/scheduler.py:run_batch",
            "/sglang/srt/model_executor/model_runner.py:forward_extend",
        ),
        (),
        (),
        "forward",
    ),
    (
        "V0 worker wrapper text",
        (),
        (
            "Exception in worker VllmWorkerProcess while processing method load_model: CUDA out of memory.",
        ),
        (),
        "weights",
    ),
    (
        "V1 sampler warm-up text",
        (),
        ("CUDA out of memory occurred when warming up sampler with 1024 dummy requests.",),
        (),
        "sampling",
    ),
    (
        "vLLM's shared attention layer under a text model is the decoder's",
        _frames(
            "/vllm/model_executor/models/qwen3.py:forward@156|attn_output = self.attn(q, k, v)",
            "/vllm/attention/layer.py:forward@323|self.impl.forward(self,",
        ),
        (),
        (),
        "forward",
    ),
    (
        "the same layer under a vision tower is the encoder's",
        _frames(
            "/vllm/model_executor/models/qwen2_5_vl.py:forward@360|x = x + self.attn(",
            "/vllm/attention/layer.py:forward@323|self.impl.forward(self,",
        ),
        (),
        (),
        "encoder",
    ),
    ("an Omni encoder stage", (), (), ("image_encoder",), "encoder"),
    ("the thinker stage is no encoder", (), (), ("thinker",), "unknown"),
    ("nothing known", _frames("/app/main.py:main"), (), (), "unknown"),
]


@pytest.mark.parametrize(
    ("frames", "texts", "stages", "site"),
    [c[1:] for c in SITE_CASES],
    ids=[c[0] for c in SITE_CASES],
)
def test_site(
    frames: tuple[Frame, ...], texts: tuple[str, ...], stages: tuple[str, ...], site: str
) -> None:
    placed = place(_failure(frames, texts, stages), knowledge.builtin())
    assert placed.site.value == site, placed.site
    if site != "unknown":
        assert placed.site.why.strip()  # what decided it, in words a report shows


PHASE_CASES = [
    (
        "vLLM profile run",
        _frames(
            "/vllm/worker/worker.py:determine_num_available_blocks",
            "/vllm/worker/model_runner.py:profile_run",
        ),
        (),
        "startup",
    ),
    (
        "SGLang event loop",
        _frames(
            "/sglang/srt/managers/scheduler.py:event_loop_normal",
            "/sglang/srt/managers/scheduler.py:run_batch",
        ),
        (),
        "running",
    ),
    (
        "a startup frame under the run loop wins",
        _frames(
            "/vllm/v1/engine/core.py:run_busy_loop",
            "/vllm/v1/worker/gpu_model_runner.py:capture_model",
        ),
        (),
        "startup",
    ),
    (
        "V0 wrapper text",
        (),
        (
            "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks: x",
        ),
        "startup",
    ),
    ("frames that do not say", _frames("/app/main.py:main"), (), None),
]


@pytest.mark.parametrize(
    ("frames", "texts", "phase"), [c[1:] for c in PHASE_CASES], ids=[c[0] for c in PHASE_CASES]
)
def test_phase(frames: tuple[Frame, ...], texts: tuple[str, ...], phase: str | None) -> None:
    placed = place(_failure(frames, texts, ()), knowledge.builtin())
    assert placed.phase.value == (phase or "unknown"), placed.phase


def test_no_built_in_marks_only_the_generated_tables() -> None:
    """Where and when code runs is generated from the engines' sources; the only marks are a
    user's own (none are shipped), and the engine markers load."""
    k = knowledge.builtin()
    assert k.sites == () and k.phases == ()
    assert {m.engine for m in k.markers} <= set(knowledge.FAMILY) | set(knowledge.STACK)


def test_the_scanner_keeps_its_fast_paths_with_the_knowledge_anchors() -> None:
    """No marker may be a substring of a stats or access line: the fast scan would then read
    every such line one by one."""
    from oomdoctor import pipeline
    from oomdoctor.extract.facts import Extractor

    scanner = Extractor(pipeline.matchers(pipeline.load_rules())).scanner
    assert scanner._stats_boring and scanner._access_boring


def test_user_marks_extend_the_tables(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "engine-markers.toml").write_text(
        '[[marker]]\nengine = "vllm"\nwhere = "text"\nmatch = "acme-serve booted"\n'
        'note = "our wrapper around vLLM"\n',
        encoding="utf-8",
    )
    (rules / "site-marks.toml").write_text(
        '[[site]]\nsite = "encoder"\nframes = ["acme/stack_a.py:"]\n', encoding="utf-8"
    )
    log = tmp_path / "x.log"
    log.write_text(
        "acme-serve booted\n"
        '  File "/srv/acme/stack_a.py", line 10, in run\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 23.57 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this "
        "process has 22.50 GiB memory in use. Of the allocated memory 21.00 GiB is allocated by "
        "PyTorch, and 0.50 GiB is reserved by PyTorch but unallocated.\n",
        encoding="utf-8",
    )
    import json

    plain = CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json", "--no-gpu"])
    extended = CliRunner().invoke(
        cli, ["diagnose", str(log), "--format", "json", "--no-gpu", "--rules", str(rules)]
    )
    before, after = json.loads(plain.stdout), json.loads(extended.stdout)
    assert before["input"]["engine"] is None and before["failure"]["site"] == "unknown"
    assert after["input"]["engine"] == "vllm" and after["failure"]["site"] == "encoder"
    assert after["verdict"]["category"] == "encoder_starvation"
    listed = CliRunner().invoke(cli, ["rules", "markers", "--rules", str(rules)])
    assert listed.exit_code == 0 and "acme-serve booted" in listed.stdout


def test_bad_marker_files_are_reported_with_file_and_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "engine-markers.toml").write_text(
        '[[marker]]\nengine = "vllm"\nwhere = "text"\nmatch = "ok"\n\n'
        '[[marker]]\nengine = "tgi"\nwhere = "txt"\nmatch = ""\ncolour = 1\n',
        encoding="utf-8",
    )
    (rules / "site-marks.toml").write_text(
        '[[site]]\nsite = "encodr"\nframes = ["x"]\n', encoding="utf-8"
    )
    result = CliRunner().invoke(cli, ["rules", "markers", "--rules", str(rules)])
    assert result.exit_code == 3
    assert "Traceback" not in result.stderr
    err = result.stderr
    assert f"{rules / 'engine-markers.toml'}:6: engine must be one of" in err
    assert "where must be one of" in err and "match must be a non-empty string" in err
    assert 'unknown key "colour"' in err
    assert f"{rules / 'site-marks.toml'}:1: no such site: 'encodr'" in err
