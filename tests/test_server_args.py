"""server_args in both print forms, parsed without eval (sglang-logs.md §2.1)."""

from __future__ import annotations

from oomdoctor.extract.signatures.startup import parse_server_args


def test_dataclass_repr() -> None:
    args = parse_server_args(
        "ServerArgs(model_path='/models/Llama-3.1-70B', tp_size=4, mem_fraction_static=0.6, "
        "chunked_prefill_size=8192, max_running_requests=None, api_key='sk-x', "
        "cuda_graph_bs=[1, 2, 4, 8], json_model_override_args='{}', disable_cuda_graph=False, "
        "lora_paths=None, attention_backend=<AttentionBackend.FLASHINFER: 'flashinfer'>, page_size=1)"
    )
    assert args["model_path"] == "/models/Llama-3.1-70B"
    assert args["tp_size"] == 4
    assert args["mem_fraction_static"] == 0.6
    assert args["max_running_requests"] is None
    assert args["disable_cuda_graph"] is False
    assert args["cuda_graph_bs"] == "[1, 2, 4, 8]"
    assert args["page_size"] == 1  # parsing continued past the enum repr


def test_dict_repr_with_nested_config() -> None:
    args = parse_server_args(
        "{'model_path': 'Qwen/Qwen3-8B', 'mem_fraction_static': 0.83, 'cuda_graph_config': "
        "{'decode': {'backend': 'full', 'max_bs': 256, 'bs': [1, 2, 4]}, 'prefill': {'backend': "
        "'breakable', 'max_bs': 8192}}, 'tp_size': 1, 'watermark_key': '<redacted>'}"
    )
    assert args["mem_fraction_static"] == 0.83
    assert "'max_bs': 256" in str(args["cuda_graph_config"])
    assert args["tp_size"] == 1


def test_truncated_line_keeps_complete_pairs() -> None:
    args = parse_server_args(
        "ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.88, chunk"
    )
    assert args == {"model_path": "/m", "tp_size": 2, "mem_fraction_static": 0.88}


def test_strings_with_commas_and_quotes() -> None:
    args = parse_server_args("ServerArgs(a='x, y', b=\"it's\", c=3)")
    assert args == {"a": "x, y", "b": "it's", "c": 3}


def test_not_a_server_args_body() -> None:
    assert parse_server_args("something else") == {}
