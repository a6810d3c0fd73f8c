"""``oomdoctor plan``: the what-if memory budget before a launch, and reading sizes like 80GiB."""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType

import click

from oomdoctor.cli.common import (
    EXIT_USAGE,
    color_option,
    fail,
    format_option,
    report_width,
    use_color,
    write_output,
    write_svg,
)
from oomdoctor.cli.numbers import MAX_BATCH, MAX_BYTES_PER_TOKEN, MAX_TOKENS, Count, Finite

#: Bytes per unit. GB/MB/TB are decimal (10⁹, as Hugging Face and data sheets give sizes);
#: GiB/MiB/TiB binary (2³⁰, as nvidia-smi and PyTorch). A bare G/M/T, or no unit, is binary.
#: SGLang's log lines say "GB" but divide by 2³⁰: a figure copied from one is GiB.
_UNIT_BYTES = MappingProxyType(
    {
        "gib": 2.0**30,
        "g": 2.0**30,
        "mib": 2.0**20,
        "m": 2.0**20,
        "tib": 2.0**40,
        "t": 2.0**40,
        "gb": 1e9,
        "mb": 1e6,
        "tb": 1e12,
    }
)


def _size_gib(value: str | None, option: str) -> float | None:
    """``80GiB``, ``141GB`` (10⁹ bytes), ``81559MiB``, or a bare GiB number, in GiB."""
    if value is None:
        return None
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GiB|GB|G|MiB|MB|M|TiB|TB|T)?\s*", value, re.IGNORECASE)
    if not m:
        fail(
            f"{option}: cannot read {value!r} as a size",
            "e.g. 80GiB, 141GB (10⁹ bytes), 81559MiB or 78 (GiB)",
            EXIT_USAGE,
        )
    gib = float(m.group(1)) * _UNIT_BYTES[(m.group(2) or "G").lower()] / 2**30
    if not 0 < gib <= MAX_SIZE_GIB:
        fail(
            f"{option}: {value!r} is not a size a GPU holds",
            "more than 0, at most 4 TiB",
            EXIT_USAGE,
        )
    return gib


#: No GPU (or checkpoint shard per GPU) is larger than this; a bigger size is a typo.
MAX_SIZE_GIB = 4096.0


#: --kv-cache-dtype values SGLang accepts (server_args.py choices across 0.4–0.5.23).
KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16", "fp4_e2m1")


def _version(ctx: click.Context, param: click.Parameter, value: str) -> str:
    import re

    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+-]?\w+)*", value):
        raise click.BadParameter(f"{value!r} is not a version such as 0.5.23")
    return value


@click.command()
@click.option(
    "--gpu",
    "gpu_name",
    metavar="NAME",
    help="The card by name: H100, H100-NVL, A100-40G, H200, B200, L4, L40S, A6000, RTX 3090, "
    "V100-32G, MI300X... or nvidia-smi's product name ('NVIDIA H100 80GB HBM3'); a wrong name "
    "lists them all.",
)
@click.option(
    "--gpu-mem",
    metavar="SIZE",
    help="The card's memory.total, e.g. 81559MiB (nvidia-smi's) or 80GiB.",
)
@click.option(
    "--pre-load-memory",
    metavar="SIZE",
    help="Free memory per GPU before the weights load, if known (a log's `Load weight begin. "
    "avail mem=78.00 GB`, which is GiB: give 78GiB). Default: the card's memory less the CUDA "
    "context.",
)
@click.option(
    "--model",
    "model_path",
    metavar="DIR|config.json",
    help="A local model directory or its config.json (weights and KV size per token from it).",
)
@click.option(
    "--weights",
    metavar="SIZE",
    help="Total weights of the checkpoint, all GPUs together (instead of --model), e.g. 16.1GB "
    "as Hugging Face shows it (10⁹ bytes) or 14.96GiB; each GPU holds SIZE ÷ (TP×PP).",
)
@click.option(
    "--kv-bytes-per-token",
    type=Count(1, MAX_BYTES_PER_TOKEN),
    metavar="N",
    help="KV bytes per token on one GPU at the given --tp (instead of --model).",
)
@click.option(
    "--tp",
    "--tp-size",
    "tp",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Tensor-parallel size.",
)
@click.option(
    "--pp",
    "--pp-size",
    "pp",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Pipeline-parallel size.",
)
@click.option(
    "--kv-cache-dtype",
    type=click.Choice(KV_CACHE_DTYPES, case_sensitive=False),
    default="auto",
    show_default=True,
    help="KV cache dtype, as SGLang's flag (auto: the model's dtype).",
)
@click.option(
    "--quantization",
    type=click.Choice(["fp8"], case_sensitive=False),
    help="Online FP8 weights of a 16-bit checkpoint, as SGLang's --quantization fp8.",
)
@click.option(
    "--context-length",
    type=Count(1, MAX_TOKENS),
    help="Tokens one request may hold (default: the model's max_position_embeddings).",
)
@click.option(
    "--chunked-prefill-size",
    type=Count(1, MAX_TOKENS),
    help="SGLang's prefill chunk in tokens (default: SGLang's for the card).",
)
@click.option(
    "--cuda-graph-max-bs",
    type=Count(1, MAX_BATCH),
    help="Largest decode CUDA-graph batch (default: SGLang's for the card); SGLang 0.5.23 calls "
    "it --cuda-graph-max-bs-decode, and the launch says so when it renames it.",
)
@click.option(
    "--cuda-graph-max-bs-decode",
    type=Count(1, MAX_BATCH),
    help="The same, by SGLang 0.5.23's name.",
)
@click.option(
    "--max-running-requests",
    type=Count(1, MAX_BATCH),
    help="Passed through to the launch command.",
)
@click.option(
    "--mem-fraction-static",
    type=Finite(0.01, 0.99),
    help="The fraction to check (default: what SGLang would pick for the card).",
)
@click.option(
    "--sglang-version",
    default="0.5.23",
    show_default=True,
    callback=_version,
    help="SGLang release whose defaults and reserve to use.",
)
@format_option()
@color_option()
@click.option("-o", "--output", metavar="FILE", help="Write the plan to FILE instead of stdout.")
@click.option("--svg", metavar="FILE", help="Also draw the card as an SVG file.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 whatever the verdict.")
def plan(
    gpu_name: str | None,
    gpu_mem: str | None,
    pre_load_memory: str | None,
    model_path: str | None,
    weights: str | None,
    kv_bytes_per_token: int | None,
    tp: int,
    pp: int,
    kv_cache_dtype: str,
    quantization: str | None,
    context_length: int | None,
    chunked_prefill_size: int | None,
    cuda_graph_max_bs: int | None,
    cuda_graph_max_bs_decode: int | None,
    max_running_requests: int | None,
    mem_fraction_static: float | None,
    sglang_version: str,
    fmt: str,
    color: str,
    output: str | None,
    svg: str | None,
    exit_zero: bool,
) -> None:
    """What-if budget before a launch: the KV pool in GiB and tokens, the workable
    --mem-fraction-static window, the smallest change that works (or the levers that do, when no
    fraction does), and a launch command that was checked to work.

    Sizes: GB, MB and TB are decimal (10⁹ bytes, as Hugging Face and data sheets use them);
    GiB, MiB and TiB binary (2³⁰ bytes, as nvidia-smi and PyTorch); a bare number is GiB.
    SGLang's log lines print GiB as "GB": give a figure copied from one as GiB.

    Exit status: 0 fine (or thin headroom, a warning); 1 the server will not start, or one
    request of the full context does not fit; 2 bad options.

    \b
    oomdoctor plan --gpu H100 --model ./Llama-3.1-8B-Instruct --context-length 32768
    oomdoctor plan --pre-load-memory 78GiB --weights 60GiB --mem-fraction-static 0.70
    """
    import json

    from oomdoctor.budget import cards, model_config
    from oomdoctor.budget.plan import EXIT_STATUS, PlanInput
    from oomdoctor.budget.plan_levers import make
    from oomdoctor.report import plan_report

    card_mib: float | None = None
    card_label = None
    if gpu_name:
        found = cards.find(gpu_name)
        if found is None:
            near = cards.nearest(gpu_name)
            fail(
                f"--gpu: unknown card {gpu_name!r}"
                + (f"; did you mean {' or '.join(near)}?" if near else ""),
                f"known: {', '.join(c.label for c in cards.CARDS)}; or give --gpu-mem SIZE",
                EXIT_USAGE,
            )
        card_label, card_mib = found.label, float(found.mib)
    elif gpu_mem:
        card_mib = (_size_gib(gpu_mem, "--gpu-mem") or 0.0) * 1024
        card_label = f"{card_mib:.0f} MiB card"
    shape = None
    if model_path:
        try:
            shape = model_config.load(Path(model_path))
        except model_config.ConfigError as exc:
            fail(f"--model: {exc}", "give a local model directory or its config.json", EXIT_USAGE)
    if cuda_graph_max_bs is not None and cuda_graph_max_bs_decode is not None:
        fail(
            "--cuda-graph-max-bs and --cuda-graph-max-bs-decode are the same setting",
            "give one of them",
            EXIT_USAGE,
        )
    graph_flag = "--cuda-graph-max-bs-decode" if cuda_graph_max_bs_decode else "--cuda-graph-max-bs"
    inputs = PlanInput(
        card_mib=card_mib,
        card_name=card_label,
        pre_gib=_size_gib(pre_load_memory, "--pre-load-memory"),
        weights_gib=_size_gib(weights, "--weights"),
        bytes_per_token=kv_bytes_per_token,
        model=shape,
        model_path=model_path,
        tp=tp,
        pp=pp,
        kv_cache_dtype=kv_cache_dtype.lower(),
        quantization=quantization.lower() if quantization else None,
        context_length=context_length,
        chunked_prefill_size=chunked_prefill_size,
        cuda_graph_max_bs=cuda_graph_max_bs or cuda_graph_max_bs_decode,
        cuda_graph_flag=graph_flag,
        max_running_requests=max_running_requests,
        mem_fraction_static=mem_fraction_static,
        sglang_version=sglang_version,
    )
    try:
        result = make(inputs)
    except ValueError as exc:
        fail(f"plan: {exc}", "see `oomdoctor plan --help`", EXIT_USAGE)
    data = plan_report.build(result)
    write_svg(data, svg)
    if fmt == "json":
        text = json.dumps(data, indent=2) + "\n"
    elif fmt == "markdown":
        text = plan_report.render_markdown(data)
    else:
        to_stream = not output or output == "-"
        text = plan_report.render_text(
            data,
            color=to_stream and use_color(color, sys.stdout),
            width=report_width(sys.stdout, to_stream),
        )
    write_output(text, output)
    sys.exit(0 if exit_zero else EXIT_STATUS[result.verdict])
