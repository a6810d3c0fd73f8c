"""The code knowledge generated from the engines' sources (oomdoctor/knowledge/generated/, built
by ``python -m tools.gen_knowledge``) and its lookups (oomdoctor.knowledge.code).

Frames are written in Python's traceback format (``  File "...", line N, in func`` and the code
line under it), with paths as a container, a checkout or IPython print them; the line numbers and
code lines are those of the indexed releases' sources.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from oomdoctor.knowledge import SITES, code, code_tables
from oomdoctor.knowledge.code_paths import module_path

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "tools" / "gen_knowledge"
GENERATED = REPO / "oomdoctor" / "knowledge" / "generated"
COMMAND = ".venv/bin/python -m tools.gen_knowledge"
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<lineno>\d+), in (?P<func>\S+)$')


def frame(text: str) -> code.CodeRole | None:
    """frame_role of a two-line traceback frame (the File line and the code line under it)."""
    head, _, body = text.strip("\n").partition("\n")
    match = FRAME.match(head)
    assert match, head
    return code.frame_role(
        match["path"], match["func"], int(match["lineno"]), body.strip() if body else ""
    )


# ---------------------------------------------------------------------------------------------
# Freshness


def _manifest() -> dict[str, object]:
    data: dict[str, object] = json.loads((GENERATED / "manifest.json").read_text("utf-8"))
    return data


@pytest.mark.skipif(not GENERATOR.is_dir(), reason="the generator is not in an sdist")
def test_manifest_matches_the_generator_source() -> None:
    from tools.gen_knowledge.digest import source_digest

    assert _manifest()["generator_digest"] == source_digest(GENERATOR), (
        f"tools/gen_knowledge changed (code or seeds.toml) since the tables were built: "
        f"run `{COMMAND}` and commit oomdoctor/knowledge/generated/"
    )


def test_tables_are_what_the_generator_last_wrote() -> None:
    import hashlib

    tables = _manifest()["tables"]
    assert isinstance(tables, dict)
    on_disk = {p.name for p in GENERATED.glob("*.json")} - {"manifest.json"}
    assert on_disk == set(tables), f"tables and manifest differ: run `{COMMAND}`"
    for name, row in tables.items():
        digest = hashlib.sha256((GENERATED / name).read_bytes()).hexdigest()
        assert digest == row["sha256"], f"{name} was edited by hand: run `{COMMAND}`"


def test_manifest_records_every_release_with_its_archive_digest() -> None:
    releases = _manifest()["releases"]
    assert isinstance(releases, dict)
    assert set(releases) == {
        "sglang", "vllm", "sglang-omni", "vllm-omni", "vllm-ascend", "transformers"
    }  # fmt: skip
    for engine, row in releases.items():
        assert row["why"], engine
        assert len(row["sources"]) >= 2, engine
        for source in row["sources"]:
            assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"]), source
        assert tuple(s["version"] for s in row["sources"]) == code_tables.releases(engine)


def test_tables_fit_the_budget_and_load_fast() -> None:
    total = sum(p.stat().st_size for p in GENERATED.glob("*.json"))
    assert total < 1_600_000, total
    start = time.perf_counter()
    for name in ("multimodal.json", "functions.json", "messages.json", "code_lines.json"):
        json.loads((GENERATED / name).read_text("utf-8"))
    assert time.perf_counter() - start < 0.15  # ~25 ms here; slack for a loaded CI machine


# ---------------------------------------------------------------------------------------------
# Frames of multimodal model files

VLLM = "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/qwen2_5_vl.py"


def test_vision_attention_by_path_function_and_line() -> None:
    role = code.frame_role(VLLM, "forward", 339)  # vLLM 0.8.5
    assert role is not None
    assert (role.site, role.qualname, role.engine) == (
        "encoder",
        "Qwen2_5_VisionAttention.forward",
        "vllm",
    )
    assert role.module == "vllm/model_executor/models/qwen2_5_vl.py"
    assert "indexed releases" in role.why and "vllm 0.7.3" in role.why


def test_vision_attention_by_code_line_when_a_fork_shifted_the_lines() -> None:
    role = frame("""
  File "/home/dev/src/vllm/vllm/model_executor/models/qwen2_5_vl.py", line 338, in forward
    output_i = F.scaled_dot_product_attention(q_i,
""")
    assert role is not None and role.site == "encoder"
    assert "code line" in role.why
    alone = code.frame_role(VLLM, "forward", None, "output_i = F.scaled_dot_product_attention(q_i,")
    assert alone is not None and alone.site == "encoder"


def test_the_top_level_vlm_forward_is_not_the_encoder() -> None:
    role = frame(f"""
  File "{VLLM}", line 1223, in forward
    hidden_states = self.language_model.model(
""")  # vLLM 0.10.2
    assert role is not None
    assert role.site == "forward"
    assert role.qualname == "Qwen2_5_VLForConditionalGeneration.forward"
    # with no line, `forward` of this file is both sides: no answer rather than a guess
    assert code.frame_role(VLLM, "forward") is None


def test_sglang_vision_block_and_transformers_vision_attention() -> None:
    role = frame("""
  File "/sgl-workspace/sglang/python/sglang/srt/models/qwen2_5_vl.py", line 194, in forward
    attn = self.attn(
""")  # SGLang 0.5.10
    assert role is not None and role.site == "encoder"
    assert role.qualname == "Qwen2_5_VisionBlock.forward"
    path = (
        "~/.venv/lib/python3.11/site-packages/transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py"
    )
    role = code.frame_role(path, "forward", 258, "attn_output = torch.cat(attn_outputs, dim=1)")
    assert role is not None and role.site == "encoder"
    assert role.qualname == "Qwen2_5_VLVisionAttention.forward"
    assert role.engine == "transformers"


def test_load_weights_is_weights() -> None:
    role = code.frame_role(VLLM, "load_weights", 1239)  # vLLM 0.10.2
    assert role is not None and role.site == "weights"
    assert role.qualname == "Qwen2_5_VLForConditionalGeneration.load_weights"


# ---------------------------------------------------------------------------------------------
# Frames of the engines' runtime (functions by site and phase)


@pytest.mark.parametrize(
    ("text", "site", "phase"),
    [
        (
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", '
            "line 1068, in init_memory_pool",
            "kv_pool",
            "startup",
        ),
        (
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", '
            "line 2890, in initialize_kv_cache",
            "kv_pool",
            "startup",
        ),
        (
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", '
            "line 2517, in capture_model",
            "graph_capture",
            "startup",
        ),
        (
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", '
            "line 1467, in init_cuda_graphs",
            "graph_capture",
            "startup",
        ),
        (
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", '
            "line 741, in event_loop_overlap",
            None,
            "running",
        ),
        (
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
            "line 701, in run_busy_loop",
            None,
            "running",
        ),
        (
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/mm_utils.py", '
            "line 447, in embed_mm_inputs",
            "encoder",
            None,
        ),
    ],
)
def test_runtime_functions(text: str, site: str | None, phase: str | None) -> None:
    role = frame(text)
    assert role is not None, text
    assert (role.site, role.phase) == (site, phase), role.why
    assert "call graph" in role.why


SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages/"


@pytest.mark.parametrize(
    ("module", "func", "site", "phase"),
    [
        # sglang's overlap thread (a thread target: its phase is a seed's, not its starter's)
        ("sglang/srt/managers/tp_worker_overlap_thread.py", "forward_thread_func", "forward", "running"),
        ("sglang/srt/managers/tp_worker_overlap_thread.py", "forward_thread_func_", "forward", "running"),
        ("sglang/srt/managers/scheduler.py", "run_batch", "forward", "running"),
        ("sglang/srt/model_executor/model_runner.py", "forward_decode", "forward", "running"),
        ("sglang/srt/disaggregation/decode.py", "event_loop_normal_disagg_decode", None, "running"),
        ("sglang/srt/managers/tp_worker.py", "exposed_step", "forward", "running"),  # 0.2.15
        ("vllm/v1/engine/core.py", "run_busy_loop", None, "running"),
        ("vllm/v1/worker/gpu_worker.py", "execute_model", "forward", "running"),
        ("vllm/v1/worker/gpu_model_runner.py", "execute_model", "forward", "running"),
        ("vllm/v1/worker/gpu_model_runner.py", "_model_forward", "forward", "running"),
        ("vllm/worker/worker_base.py", "execute_model", "forward", "running"),  # V0
        ("vllm/worker/worker_base.py", "start_worker_execution_loop", None, "running"),
        ("vllm/engine/async_llm_engine.py", "run_engine_loop", None, "running"),
        ("vllm_ascend/worker/worker_v1.py", "execute_model", "forward", "running"),
        ("vllm_ascend/worker/model_runner_v1.py", "initialize_kv_cache", "kv_pool", "startup"),
    ],
)  # fmt: skip
def test_serving_loops_and_worker_steps(
    module: str, func: str, site: str | None, phase: str | None
) -> None:
    role = code.frame_role(SITE_PACKAGES + module, func)
    assert role is not None, (module, func)
    assert (role.site, role.phase) == (site, phase), role.why


@pytest.mark.parametrize(
    ("module", "func"),
    [
        ("vllm/v1/executor/multiproc_executor.py", "worker_busy_loop"),
        ("vllm/v1/executor/multiproc_executor.py", "worker_main"),
        ("vllm/executor/multiproc_worker_utils.py", "_run_worker_process"),
        ("vllm/worker/worker_base.py", "execute_method"),
        ("sglang/srt/managers/scheduler.py", "run_scheduler_process"),
    ],
)
def test_dispatch_loops_are_known_but_of_either_phase(module: str, func: str) -> None:
    """worker_busy_loop runs initialize_from_config and compile_or_warm_up_model at startup
    and execute_model while serving: known, no phase of its own (the frames below decide)."""
    role = code.frame_role(SITE_PACKAGES + module, func)
    assert role is not None, (module, func)
    assert (role.site, role.phase) == (None, None)
    assert "either phase" in role.why


def test_overrides_place_torch_frames() -> None:
    role = frame(
        '  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py", line 88, '
        "in capture_end"
    )
    assert role is not None and role.site == "graph_capture" and role.engine == "torch"
    assert role.why  # the override's reason


def test_unknown_paths_and_functions_are_none() -> None:
    assert code.frame_role("/home/dev/train.py", "main", 12) is None
    assert code.frame_role("<frozen runpy>", "_run_module_as_main", 198) is None
    assert code.frame_role(VLLM.replace("qwen2_5_vl", "no_such_model"), "forward", 10) is None


def test_module_path_forms() -> None:
    assert module_path("/sgl-workspace/sglang/python/sglang/srt/models/qwen2_vl.py") == (
        "sglang/srt/models/qwen2_vl.py"
    )
    assert module_path("C:\\src\\vllm\\vllm\\engine\\llm_engine.py") == "vllm/engine/llm_engine.py"
    assert module_path(
        "~/miniconda3/lib/python3.10/site-packages/vllm_omni/entrypoints/omni.py"
    ) == ("vllm_omni/entrypoints/omni.py")
    assert module_path("/usr/lib/python3/dist-packages/torch/nn/modules/module.py") is None


# ---------------------------------------------------------------------------------------------
# Messages, stages, the name fallback


def test_sglang_kv_pool_message_has_its_site() -> None:
    line = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    role = code.message_role(line)
    assert role is not None
    assert (role.site, role.phase, role.engine) == ("kv_pool", "startup", "sglang")
    assert "raises this" in role.why


def test_vllm_cuda_graph_profiling_hint_is_found_and_its_phase_is_startup() -> None:
    line = (
        "WARNING 05-02 10:00:00 [gpu_worker.py:804] CUDA graph memory profiling is disabled "
        "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not "
        "accounted for during KV cache allocation, which may require lowering "
        "--gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of "
        "v0.21.0) and increasing --gpu-memory-utilization from 0.9000 to 0.9312."
    )
    role = code.message_role(line)
    assert role is not None
    assert role.qualname == "Worker.determine_available_memory" and role.phase == "startup"
    assert "0.20.0" in role.why and "0.33.0" in role.why
    cut = line[: line.index("KV cache allocation")]  # a paste cut mid-message still reads
    again = code.message_role(cut)
    assert again is not None and again.qualname == role.qualname
    assert any(
        a.startswith("CUDA graph memory profiling is disabled") for a in code.message_anchors()
    )


@pytest.mark.parametrize("quote", ["`", ""])
def test_vllm_sampler_warm_up_oom_is_sampling_at_startup(quote: str) -> None:
    """An f-string message raised ``from e`` inside ``except RuntimeError``; a paste rendered
    as Markdown loses the backticks around the flag names."""
    line = (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
        f"requests. Please try lowering {quote}max_num_seqs{quote} or "
        f"{quote}gpu_memory_utilization{quote} when initializing the engine."
    )
    role = code.message_role(line)
    assert role is not None
    assert (role.site, role.phase) == ("sampling", "startup"), role.why
    assert role.qualname.endswith("._dummy_sampler_run")
    pooler = code.message_role(line.replace("sampler with", "pooler with"))
    assert pooler is not None and pooler.qualname.endswith("._dummy_pooler_run")
    assert pooler.phase == "startup"


def test_message_anchors_are_literal_and_not_trivial() -> None:
    anchors = code.message_anchors()
    assert len(anchors) > 300
    assert all(len(a) >= 14 for a in anchors)
    assert code.message_role("INFO: all good, 12 requests served") is None


@pytest.mark.parametrize(
    ("name", "site"),
    [
        ("image_encoder", "encoder"),
        ("audio_encoder", "encoder"),
        ("code2wav", "encoder"),
        ("token2wav", "encoder"),
        ("stage_workers.image_encoder", "encoder"),
        ("thinker", None),
        ("talker_ar", None),
        ("mm_aggregate", None),
        ("dit", None),
        ("my_vocoder_v2", "encoder"),  # not in the tables: the same vocabulary decides
    ],
)
def test_stage_names(name: str, site: str | None) -> None:
    assert code.stage_role(name) == site


def test_name_heuristic_is_the_fallback() -> None:
    path = "/opt/fork/mymodels/custom_vlm.py"
    assert code.frame_role(path, "_vision_forward", 10) is None  # in no table
    assert code.name_heuristic(path, "_vision_forward") == "encoder"
    assert code.name_heuristic("/opt/x/models/internvit_6b.py", "forward") == "encoder"
    assert code.name_heuristic(path, "forward", "image_embeds = self.visual(pixel_values)") == (
        "encoder"
    )
    assert code.name_heuristic(path, "embed_tokens") is None  # one word of a pair is not enough
    assert code.name_heuristic(path, "patch_embed") == "encoder"
    assert code.name_heuristic(path, "PatchEmbed") == "encoder"
    assert code.name_heuristic("/opt/x/models/llama.py", "forward", "h = self.mlp(x)") is None


# ---------------------------------------------------------------------------------------------
# Every model file family, not one example


def _vision_classes(prefix: str) -> list[tuple[str, code_tables.Variant, code_tables.Layout, int]]:
    out = []
    for module in code_tables.table("multimodal.json")["files"]:
        if not module.startswith(prefix):
            continue
        for variant in code_tables.mm_file(module):
            for layout, start, _end in variant.classes:
                if "Vision" in layout.cls and layout.role == "e" and "forward" in layout.methods:
                    out.append((module, variant, layout, start))
    return out


@pytest.mark.parametrize("prefix", ["vllm/", "sglang/", "transformers/"])
def test_every_vision_class_of_every_release_is_the_encoder(prefix: str) -> None:
    """For each indexed release, a line inside a *Vision* encoder class's span, with a forward
    of that class, comes out encoder. The exceptions must be honest ambiguity: another release
    puts a language-side forward on that line."""
    cases = _vision_classes(prefix)
    assert len(cases) > 50
    wrong = []
    for module, variant, layout, start in cases:
        role = code.frame_role(f"/site-packages/{module}", "forward", start + 1)
        if role is not None and role.site == "encoder":
            continue
        others = [
            inner
            for other in code_tables.mm_file(module)
            if other is not variant
            for inner, s, e in other.classes
            if s <= start + 1 <= e and inner.role != "e" and "forward" in inner.methods
        ]
        if not others:
            wrong.append(f"{module}:{layout.cls} (line {start + 1}) -> {role}")
    assert not wrong, "\n".join(wrong)


#: Text models of both engines (the commonest OOM of all is in their forward).
TEXT_MODELS = (
    "llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v2", "gpt_oss",
    "glm4", "glm4_moe", "gemma2", "gemma3_causal", "nemotron_h", "minicpm", "internlm2",
    "qwen3_next", "llama4",
)  # fmt: skip


@pytest.mark.parametrize("folder", ["sglang/srt/models/", "vllm/model_executor/models/"])
def test_text_model_forwards_are_never_the_encoder(folder: str) -> None:
    """A VLM's hook that reaches a text model (DotsOCR's self.model = Qwen2ForCausalLM) does
    not make it an encoder: every forward frame of a text model file is the language side."""
    checked = 0
    for name in TEXT_MODELS:
        module = f"{folder}{name}.py"
        if not code_tables.text_file(module) and not code_tables.mm_file(module):
            continue
        checked += 1
        layouts = (x for v in code_tables.mm_file(module) for x, _, _ in v.classes)
        owners = {"", *(x.cls for x in layouts)}
        for owner in sorted(owners):
            func = f"{owner}.forward" if owner else "forward"
            for line in (None, *range(1, 3000, 7)):
                role = code.frame_role(SITE_PACKAGES + module, func, line)
                assert role is None or role.site != "encoder", (module, func, line, role.why)
        role = code.frame_role(SITE_PACKAGES + module, "forward", 417)
        assert role is not None and role.site == "forward", module
    assert checked >= 12


def test_no_language_model_class_is_an_encoder() -> None:
    """No class named like a language model (*ForCausalLM, *LMHeadModel) is an encoder class in
    the engines' tables, and no encoder class is defined in a text models' file."""
    wrong = []
    for module in code_tables.table("multimodal.json")["files"]:
        if module.startswith("transformers/"):
            continue
        for variant in code_tables.mm_file(module):
            assert not variant.mask & code_tables.text_file(module), module
            for layout, _, _ in variant.classes:
                if layout.role == "e" and layout.cls.endswith(("ForCausalLM", "LMHeadModel")):
                    wrong.append(f"{module}:{layout.cls}")
    assert not wrong, wrong


def test_vision_classes_left_out_are_listed_with_a_reason() -> None:
    listed = _manifest()["vision_not_encoder"]
    assert isinstance(listed, list)
    for row in listed:
        assert row.endswith(
            (
                "(language side)",
                "(top-level model)",
                "(built by both sides)",
                "(no hook or tower reaches it)",
            )
        ), row


def test_every_site_a_table_names_is_known() -> None:
    assert set(code_tables.SITE_CODES.values()) <= set(SITES)
    for module in list(code_tables.table("functions.json")["functions"])[:400]:
        for methods in code_tables.functions(module).values():
            for labels in methods.values():
                for label in labels:
                    assert label.site is None or label.site in SITES
                    assert label.phase in (None, "startup", "running", "either")
