"""``oomdoctor diagnose``: one incident from log files or standard input, and ``--follow``."""

from __future__ import annotations

import contextlib
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
from oomdoctor.cli.gpu_state import gpu_state
from oomdoctor.cli.live_read import GRACE_S, stop_notice


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
    help="Parse standard input (or follow LOG as `tail -F` does: rotation, truncation) as it "
    "flows; take the GPU snapshot at the crash line.",
)
@click.option(
    "--tee",
    is_flag=True,
    help="With --follow: copy the input to stdout unchanged (report to stderr).",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=GRACE_S,
    show_default=True,
    metavar="SECONDS",
    help="Standard input and --follow: report this long after the crash line, once the input "
    "pauses, without waiting for its end (SGLang hangs after a crash). Ctrl-C or SIGTERM "
    "also reports on what was read; a second one quits at once (exit 130).",
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
    grace: float,
    engine: str,
) -> None:
    """Diagnose one incident from LOG files (several = one incident, e.g. one per rank).

    With no LOG (or "-") the log is read from standard input:
    `python -m sglang.launch_server ... 2>&1 | oomdoctor diagnose -`. The report comes at the
    end of the input, --grace seconds after a crash line, or at Ctrl-C (SIGINT) or SIGTERM,
    whichever is first, with the usual exit status (1: an OOM was diagnosed). Without --snapshot or
    --no-gpu, the GPUs of this machine are read through NVML when it is available. An input
    with nothing but whitespace in it is an error (exit 3); files that look like different
    incidents (another model, release, engine or launch) get a warning.
    """
    if snapshots and no_gpu:
        fail("--snapshot and --no-gpu exclude each other", code=EXIT_USAGE)
    if tee and not follow:
        fail("--tee goes with --follow", code=EXIT_USAGE)
    if follow and len(logs) > 1:
        fail("--follow reads one input: standard input (-) or one LOG", code=EXIT_USAGE)
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
    from oomdoctor.read.sources import InputError

    if follow:
        from oomdoctor.cli.follow import Report
        from oomdoctor.cli.follow import follow as follow_input

        how = Report(
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
            grace,
        )
        follow_input(rules, knowledge, how, None if names == ["-"] else names[0])
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
    from oomdoctor.cli.live_read import Interrupts

    live = _live_stdin(names)
    interrupts = Interrupts()
    # NVML is read when the input ends: for a live server that is after its crash, not before
    early = bool(snapshots) or no_gpu or live is None
    gpu = gpu_state(snapshots, no_gpu) if early else None
    # rich draws the bar in colour, and read/progress.py takes no colour setting: none at all
    bar = progress.for_inputs(names) if color != "never" else None
    with interrupts if live is not None else contextlib.nullcontext():
        stdin = _stdin(names, live, rules, knowledge, grace, interrupts)
        try:
            incident = pipeline.read(
                names,
                rules,
                stdin=cast(BinaryIO, stdin) if stdin is not None else None,
                progress=bar,
                knowledge=knowledge,
            )
        except InputError as exc:
            fail(str(exc), "give a log as plain text, gzip, bzip2 or xz, or - for standard input")
        finally:
            if bar is not None:
                bar.close()
        reason = getattr(getattr(stdin, "reader", None), "reason", None)
        if interrupts.received is not None and stdin is not None and not stdin.seen.text:
            fail("interrupted before anything was read", code=128 + interrupts.received)
        if not early:
            gpu = gpu_state(snapshots, no_gpu)
        diagnosis = pipeline.diagnose(
            incident,
            rules,
            gpu,
            cuda_visible_devices,
            None if engine == "auto" else engine,
            knowledge,
        )
        stopped = stop_notice(reason, interrupts.received, grace, "<stdin>")
        if stopped:
            notices.append(stopped)
        _report(diagnosis, names, surveys, notices, stdin, fmt, output, no_redact, svg, color)
    oom = diagnosis.verdict.category in OOM_CATEGORIES
    sys.exit(EXIT_OOM if oom and not exit_zero else EXIT_OK)


def _report(
    diagnosis: Any,
    names: list[str],
    surveys: Any,
    notices: list[str],
    stdin: Any,
    fmt: str,
    output: str | None,
    no_redact: bool,
    svg: str | None,
    color: str,
) -> None:
    """The report of a diagnosis read from files and standard input (or exit 3 when they were
    all empty)."""
    from oomdoctor.cli import inputs
    from oomdoctor.read.sources import EMPTY_NOTICE, label

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


def _live_stdin(names: list[str]) -> int | None:
    """Standard input's descriptor when it is read here (``-``), None when it is not read, or
    when it has no descriptor (a test's stream: read as it is)."""
    if "-" not in names:
        return None
    try:
        return int(sys.stdin.fileno())
    except (AttributeError, ValueError, OSError):
        return None


def _stdin(
    names: list[str], fd: int | None, rules: Any, knowledge: Any, grace: float, interrupts: Any
) -> Any:
    """What the pipeline reads for ``-`` (None: not read): the live input (it ends at EOF, a
    signal, or --grace after a crash line), or standard input's stream as it is."""
    from oomdoctor.cli import inputs

    if "-" not in names:
        return None
    if fd is None:
        return inputs.WatchedInput(sys.stdin.buffer) if sys.stdin is not None else None
    from oomdoctor import pipeline
    from oomdoctor.cli.live_read import CrashWatch, LiveInput, LiveReader
    from oomdoctor.cli.live_sources import PipeSource

    def parser(on_crash: Any) -> Any:
        return pipeline.stream_parser(rules, "<stdin>", on_crash, knowledge)

    watch = CrashWatch(parser)
    reader = LiveReader(PipeSource(fd), interrupts, grace, lambda: watch.at, watch.catch_up, say)
    return LiveInput(reader, fd, watch, inputs.TextSeen())
