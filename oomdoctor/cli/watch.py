"""``oomdoctor watch -- COMMAND``: run the server, pass its output through, diagnose a crash.

The subprocess handling (process group, signals, the hang timer) lives in
:mod:`oomdoctor.cli.supervise`; this module is the command around it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

import click

from oomdoctor.cli.common import (
    EXIT_USAGE,
    color_option,
    complete_files,
    emit_report,
    fail,
    format_option,
    load_rules_and_knowledge,
    no_redact_option,
    refuse_overwrite,
    rules_option,
    say,
    write_text,
)
from oomdoctor.cli.gpu_state import after_capture, capture_fields, live_snapshotter

if TYPE_CHECKING:
    import subprocess

#: The --log copy is appended to, and created 0600: the server's output holds its keys.
_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--log",
    "log_path",
    metavar="FILE",
    shell_complete=complete_files,
    help="Also append the server's output to FILE.",
)
@click.option(
    "-o",
    "--output",
    metavar="REPORT",
    shell_complete=complete_files,
    help="Also write the report to REPORT.",
)
@format_option("Format of the REPORT file (the summary on stderr is always text).")
@color_option()
@click.option("--always", is_flag=True, help="Report even when the server exits cleanly.")
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds after a crash line before a server that hangs is diagnosed anyway.",
)
@click.option("--no-gpu", is_flag=True, help="Do not read the GPU state at the crash.")
@rules_option
@no_redact_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def watch(
    log_path: str | None,
    output: str | None,
    fmt: str,
    color: str,
    always: bool,
    grace: float,
    no_gpu: bool,
    rule_dirs: tuple[str, ...],
    no_redact: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (after --), pass its output through unchanged, diagnose if it crashes.

    oomdoctor watch --log server.log -- python -m sglang.launch_server --model-path ...

    The GPU snapshot is taken the moment a crash line appears. Exits with the server's status
    (128+N when a signal N ended it); SIGINT/SIGTERM/SIGHUP go to the server's process group.
    A server that still runs --grace seconds after its crash line is diagnosed anyway; its
    output keeps passing through until it exits.
    """
    from oomdoctor import pipeline
    from oomdoctor.cli.supervise import TERM_TIMEOUT_S, Capture, run

    args = list(command)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        fail(
            "no command to run", "oomdoctor watch -- python -m sglang.launch_server ...", EXIT_USAGE
        )
    refuse_overwrite(output, "-o", [log_path or "-"], "the --log file")
    rules, knowledge = load_rules_and_knowledge(rule_dirs)
    capture = Capture(live_snapshotter(no_gpu, ()))
    parser = pipeline.stream_parser(
        rules, log_path or "<server output>", capture.crashed, knowledge
    )
    log = None
    if log_path:
        try:
            # unbuffered: a write that fails (a full disk) fails at once, in the copy that
            # stops and says so, never later in close()
            log = os.fdopen(os.open(log_path, _LOG_FLAGS, 0o600), "ab", buffering=0)
        except OSError as exc:
            fail(f"cannot open {log_path}: {exc.strerror or exc}")
    reported = False

    def report_now(running: subprocess.Popen[bytes] | None = None) -> None:
        """The report; ``running``: a server that had not exited --grace s after its crash."""
        nonlocal reported
        diagnosis = pipeline.diagnose(parser.incident(), rules, after_capture(capture, (), no_gpu))
        diagnosis = diagnosis._replace(capture=capture_fields(capture))
        if running is not None:
            note = (
                f"the server (pid {running.pid}) was still running {grace:g} s after its crash "
                "line; this report did not wait for it to exit"
            )
            diagnosis = diagnosis._replace(notices=(*diagnosis.notices, note))
        # Nothing here may end watch: a report that cannot be written is a warning, and the
        # exit status stays the server's.
        write_text("\n-- oomdoctor --\n", None, sys.stderr, strict=False)
        emit_report(diagnosis, "text", None, no_redact, None, sys.stderr, color, strict=False)
        if output:
            emit_report(diagnosis, fmt, output, no_redact, None, sys.stderr, strict=False)
        if running is not None and running.poll() is None:
            say(
                f"the server (pid {running.pid}) is still running after the report; "
                "watch keeps passing its output through until it exits, then exits with its "
                f"status (Ctrl-C and SIGTERM are passed on to it; a second Ctrl-C, or "
                f"{TERM_TIMEOUT_S:g} s after SIGTERM, kills it)"
            )
        reported = True

    def copy_failed(name: str, exc: OSError) -> None:
        """Said once per copy (supervise stops a copy at its first failure)."""
        reason = exc.strerror or str(exc)
        if name == "log":
            say(
                f"warning: cannot write the server's output to {log_path}: {reason}; "
                "passing it through without the copy"
            )
        else:
            say(f"warning: cannot pass the server's {name} through: {reason}")

    try:
        result = run(
            args,
            parser,
            capture,
            log=log,
            grace_s=grace,
            on_hang=report_now,
            on_error=copy_failed,
        )
    except ValueError as exc:  # a NUL byte in the command: nothing could run it
        fail(f"cannot run {args[0]!r}: {exc}", code=EXIT_USAGE)
    except OSError as exc:
        from oomdoctor.cli.exec_failure import explain

        status, why = explain(args[0], exc)
        fail(why, code=status)
    finally:
        if log is not None:
            with contextlib.suppress(OSError):
                log.close()
    if result.held_open is not None:
        from oomdoctor.cli.supervise import DRAIN_AFTER_EXIT_S

        pids = ", ".join(map(str, result.held_open[:5])) or "unknown"
        say(
            f"notice: the server exited, but process(es) it started (pid {pids}) still held its "
            f"output {DRAIN_AFTER_EXIT_S:g} s later; their output after this is not passed through"
        )
    if not reported and (capture.crash_line is not None or result.status != 0 or always):
        report_now()
    sys.exit(result.status)
