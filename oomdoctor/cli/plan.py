"""``oomdoctor plan``: the what-if memory budget before a launch, and reading sizes like 80GiB."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from oomdoctor.cli.common import (
    EXIT_USAGE,
    fail,
    format_option,
    terminal_width,
    write_output,
    write_svg,
)


def _size_gib(value: str | None, option: str) -> float | None:
    """``80GiB``, ``80G``, ``80GB`` (GiB, as SGLang means it), ``81559MiB``, or a bare GiB number."""
    if value is None:
        return None
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GiB|GB|G|MiB|MB|M|TiB|TB|T)?\s*", value, re.IGNORECASE)
    if not m:
        fail(f"{option}: cannot read {value!r} as a size", "e.g. 80GiB, 81559MiB or 78", EXIT_USAGE)
    unit = (m.group(2) or "G")[0].upper()
    return float(m.group(1)) * {"G": 1.0, "M": 1 / 1024, "T": 1024.0}[unit]


@click.command()
@click.option(
    "--gpu", "gpu_name", metavar="NAME", help="A card by name: H100-80G, A100-40G, H200, L4, ..."
)
@click.option("--gpu-mem", metavar="SIZE", help="The card's memory.total, e.g. 80GiB or 81559MiB.")
@click.option(
    "--pre-load-memory",
    metavar="SIZE",
    help="Free memory before weights load, if known (a log's `Load weight begin. avail mem`).",
)
@click.option(
    "--model",
    "model_path",
    metavar="DIR|config.json",
    help="A local model directory or its config.json.",
)
@click.option("--weights", metavar="SIZE", help="Weights per GPU (instead of --model).")
@click.option(
    "--kv-bytes-per-token",
    type=int,
    metavar="N",
    help="KV bytes per token per GPU (instead of --model).",
)
@click.option("--tp", "--tp-size", "tp", type=click.IntRange(1), default=1, show_default=True)
@click.option("--pp", "--pp-size", "pp", type=click.IntRange(1), default=1, show_default=True)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--context-length", type=click.IntRange(1))
@click.option("--chunked-prefill-size", type=int)
@click.option("--cuda-graph-max-bs", type=click.IntRange(1))
@click.option("--max-running-requests", type=click.IntRange(1))
@click.option(
    "--mem-fraction-static",
    type=click.FloatRange(0.01, 1.0),
    help="Default: what SGLang would pick.",
)
@click.option("--sglang-version", default="0.5.23", show_default=True)
@format_option(None)
@click.option("-o", "--output", metavar="FILE")
@click.option("--svg", metavar="FILE", help="Also draw the card as an SVG file.")
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
    context_length: int | None,
    chunked_prefill_size: int | None,
    cuda_graph_max_bs: int | None,
    max_running_requests: int | None,
    mem_fraction_static: float | None,
    sglang_version: str,
    fmt: str,
    output: str | None,
    svg: str | None,
) -> None:
    """What-if budget before a launch: KV GiB and tokens, the workable --mem-fraction-static window,
    and a launch command. The worked example of DESIGN §2:

    oomdoctor plan --pre-load-memory 78GiB --weights 60GiB --mem-fraction-static 0.70
    """
    import json

    from oomdoctor.budget import model_config, sglang_defaults
    from oomdoctor.budget.plan import PlanInput, make
    from oomdoctor.report import plan_report

    card_mib: float | None = None
    card_label = None
    if gpu_name:
        found = sglang_defaults.card(gpu_name)
        if found is None:
            names = ", ".join(n for n, _ in sglang_defaults.CARDS_MIB)
            fail(
                f"--gpu: unknown card {gpu_name!r}",
                f"known: {names}; or give --gpu-mem SIZE",
                EXIT_USAGE,
            )
        card_label, card_mib = found[0], float(found[1])
    elif gpu_mem:
        card_mib = (_size_gib(gpu_mem, "--gpu-mem") or 0.0) * 1024
        card_label = f"{card_mib:.0f} MiB card"
    shape = None
    if model_path:
        try:
            shape = model_config.load(Path(model_path))
        except model_config.ConfigError as exc:
            fail(f"--model: {exc}", "give a local model directory or its config.json")
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
        kv_cache_dtype=kv_cache_dtype,
        context_length=context_length,
        chunked_prefill_size=chunked_prefill_size,
        cuda_graph_max_bs=cuda_graph_max_bs,
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
        to_terminal = not output and sys.stdout.isatty()
        width = terminal_width() if to_terminal else 100
        text = plan_report.render_text(
            data, color=to_terminal and "NO_COLOR" not in os.environ, width=max(width, 60)
        )
    write_output(text, output)
