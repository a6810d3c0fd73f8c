"""``oomdoctor diagnose``: one incident from log files or standard input, and ``--follow``."""

from __future__ import annotations

import os
import sys
from typing import Any, BinaryIO, cast

import click

from oomdoctor.cli.common import (
    EXIT_OK,
    EXIT_OOM,
    EXIT_USAGE,
    color_option,
    complete_files,
    emit_report,
    fail,
    format_option,
    is_terminal,
    load_rules_and_knowledge,
    no_redact_option,
    refuse_overwrite,
    say,
)
from oomdoctor.cli.gpu_state import after_capture, capture_fields, gpu_state, live_snapshotter
from oomdoctor.cli.streams import silence


@click.command()
@click.argument("logs", nargs=-1, metavar="[LOG ...|-]", shell_complete=complete_files)
@format_option()
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    shell_complete=complete_files,
    help="Write the report to FILE instead of stdout.",
)
@color_option()
@click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Add the rules in DIR (repeatable).",
)
@no_redact_option
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when an OOM is diagnosed.")
@click.option(
    "--snapshot",
    "snapshots",
    multiple=True,
    metavar="FILE",
    shell_complete=complete_files,
    help="GPU state saved on the GPU host: `oomdoctor snapshot` JSON, `nvidia-smi -q -x` XML, or "
    "`nvidia-smi --query-compute-apps/--query-gpu ... --format=csv` (repeat to join two CSVs).",
)
@click.option("--no-gpu", is_flag=True, help="Do not read the GPU state (no live NVML snapshot).")
@click.option(
    "--cuda-visible-devices",
    metavar="LIST",
    help="The server's CUDA_VISIBLE_DEVICES, to map its ranks to GPUs in the snapshot.",
)
@click.option(
    "--svg",
    metavar="FILE",
    shell_complete=complete_files,
    help="Also draw the card (now and recommended) as an SVG file.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Read standard input as it flows; take the GPU snapshot at the crash, report at the end.",
)
@click.option(
    "--tee",
    is_flag=True,
    help="With --follow: copy the input to stdout unchanged (report to stderr).",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "sglang", "vllm"]),
    default="auto",
    show_default=True,
    help="The server that wrote the log (auto: detected from the log).",
)
def diagnose(
    logs: tuple[str, ...],
    fmt: str,
    output: str | None,
    color: str,
    rule_dirs: tuple[str, ...],
    no_redact: bool,
    exit_zero: bool,
    snapshots: tuple[str, ...],
    no_gpu: bool,
    cuda_visible_devices: str | None,
    svg: str | None,
    follow: bool,
    tee: bool,
    engine: str,
) -> None:
    """Diagnose one incident from LOG files (several = one incident, e.g. one per rank).

    With no LOG (or "-") the log is read from standard input:
    `python -m sglang.launch_server ... 2>&1 | oomdoctor diagnose -`. Without --snapshot or
    --no-gpu, the GPUs of this machine are read through NVML when it is available. An input
    with nothing but whitespace in it is an error (exit 3); files that look like different
    incidents (another model, release, engine or launch) get a warning.
    """
    if snapshots and no_gpu:
        fail("--snapshot and --no-gpu exclude each other", code=EXIT_USAGE)
    if tee and not follow:
        fail("--tee goes with --follow", code=EXIT_USAGE)
    if follow and logs not in ((), ("-",)):
        fail("--follow reads standard input: give no LOG, or -", code=EXIT_USAGE)
    names = list(logs) or ["-"]
    if "-" in names and sys.stdin is None:
        fail(
            "cannot read standard input: it is closed",
            "give a log file, or pipe the server's output in",
        )
    if sys.stdout is None and (not output or output == "-") and not tee:
        fail("cannot write the report: standard output is closed", "give -o FILE")
    refuse_overwrite(output, "-o", [*names, *snapshots])
    refuse_overwrite(svg, "--svg", [*names, *snapshots])
    refuse_overwrite(svg, "--svg", [output or "-"], "the -o file")
    if "-" in names and is_terminal(sys.stdin) and not logs:
        fail(
            "no input: give a log file, or pipe the server's output in",
            "oomdoctor diagnose server.log   or   ... 2>&1 | oomdoctor diagnose -",
            EXIT_USAGE,
        )
    if names.count("-") > 1:
        fail("standard input (-) can be read only once", code=EXIT_USAGE)
    rules, knowledge = load_rules_and_knowledge(rule_dirs)

    from oomdoctor import pipeline
    from oomdoctor.cli import inputs
    from oomdoctor.model import OOM_CATEGORIES
    from oomdoctor.read.sources import EMPTY_NOTICE, InputError, label

    if follow:
        _follow(
            rules,
            knowledge,
            fmt,
            output,
            no_redact,
            exit_zero,
            snapshots,
            no_gpu,
            cuda_visible_devices,
            svg,
            tee,
            engine,
            color,
        )
    from oomdoctor.read import progress

    surveys = inputs.survey(names, rules, knowledge, heads=len(names) > 1)
    if all(s is not None and s.blank for s in surveys):
        fail(inputs.empty_message(names))
    notices = []
    for first, second, what in inputs.different_incidents(surveys):
        say(
            f"warning: {first} and {second} look like different incidents "
            f"({what}); diagnosing them together"
        )
        notices.append(
            f"{first} and {second} look like different incidents ({what}); "
            "they were diagnosed together"
        )
    stdin = inputs.WatchedInput(sys.stdin.buffer) if "-" in names else None
    gpu = gpu_state(snapshots, no_gpu)
    # rich draws the bar in colour, and read/progress.py takes no colour setting: none at all
    bar = progress.for_inputs(names) if color != "never" else None
    try:
        diagnosis = pipeline.run(
            names,
            rules,
            stdin=cast(BinaryIO, stdin) if stdin is not None else None,
            progress=bar,
            gpu=gpu,
            cuda_visible_devices=cuda_visible_devices,
            engine_override=None if engine == "auto" else engine,
            knowledge=knowledge,
        )
    except InputError as exc:
        fail(str(exc), "give a log as plain text, gzip, bzip2 or xz, or - for standard input")
    finally:
        if bar is not None:
            bar.close()
    empty = inputs.empty_inputs(names, surveys, diagnosis.incident.notices, stdin)
    if len(empty) == len(names):
        fail(inputs.empty_message(empty))
    for name in empty:  # a 0-byte input has the pipeline's notice already
        notice = EMPTY_NOTICE.format(label=label(name))
        if notice not in diagnosis.notices:
            notices.append(notice)
    if notices:
        diagnosis = diagnosis._replace(notices=(*diagnosis.notices, *notices))
    emit_report(diagnosis, fmt, output, no_redact, svg, sys.stdout, color)
    oom = diagnosis.verdict.category in OOM_CATEGORIES
    sys.exit(EXIT_OOM if oom and not exit_zero else EXIT_OK)


def _follow(
    rules: Any,
    knowledge: Any,
    fmt: str,
    output: str | None,
    no_redact: bool,
    exit_zero: bool,
    snapshots: tuple[str, ...],
    no_gpu: bool,
    cuda_visible_devices: str | None,
    svg: str | None,
    tee: bool,
    engine: str = "auto",
    color: str = "auto",
) -> None:
    """`diagnose --follow -`: parse a pipe as it flows, snapshot at the crash, report at EOF."""
    from oomdoctor import pipeline
    from oomdoctor.cli import inputs
    from oomdoctor.cli.supervise import Capture
    from oomdoctor.model import OOM_CATEGORIES

    capture = Capture(live_snapshotter(no_gpu, snapshots))
    parser = pipeline.stream_parser(rules, "<stdin>", capture.crashed, knowledge)
    fd = sys.stdin.fileno()
    copy = _Tee(sys.stdout) if tee else None
    seen = inputs.TextSeen()
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        seen.see(data)
        if copy is not None:
            copy.write(data)
        parser.feed(data)
    parser.close()
    if parser.input_error:  # a stream no decoder here reads (zstd before Python 3.14, lz4, zip)
        fail(parser.input_error)
    if not seen.text:
        fail(inputs.empty_message(["-"]))
    capture.wait()
    gpu = after_capture(capture, snapshots, no_gpu)
    diagnosis = pipeline.diagnose(
        parser.incident(), rules, gpu, cuda_visible_devices, None if engine == "auto" else engine
    )
    diagnosis = diagnosis._replace(capture=capture_fields(capture))
    emit_report(diagnosis, fmt, output, no_redact, svg, sys.stderr if tee else sys.stdout, color)
    oom = diagnosis.verdict.category in OOM_CATEGORIES
    sys.exit(EXIT_OOM if oom and not exit_zero else EXIT_OK)


class _Tee:
    """``--tee``'s copy of the input on stdout. When it cannot be written the input is still read
    to its end and diagnosed: a reader that went away (``| head``) stops the copy quietly, any
    other failure (a closed stdout, ``/dev/full``) with one warning."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.fd: int | None = None
        if stream is None:
            say("warning: standard output is closed: the input is not copied (--tee)")
            return
        self.fd = stream.fileno()

    def write(self, data: bytes) -> None:
        if self.fd is None:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except BrokenPipeError:
            self.fd = None
            silence(self.stream)
        except OSError as exc:
            self.fd = None
            silence(self.stream)
            say(
                f"warning: cannot copy the input to standard output: {exc.strerror or exc}; "
                "reading on without the copy (--tee)"
            )
