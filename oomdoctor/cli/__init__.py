"""Command line. The only package that touches stdin/stdout/stderr, files and exit codes.

This module is the face of the package: the ``cli`` group, the console entry point ``main()``
and the exit codes. Each command lives in a module of its own and is attached here; the command
modules never import this one, so there is no import cycle.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from oomdoctor import __version__
from oomdoctor.cli.common import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_OOM,
    EXIT_USAGE,
    say,
)
from oomdoctor.cli.diagnose import diagnose
from oomdoctor.cli.plan import plan
from oomdoctor.cli.rules import rules
from oomdoctor.cli.snapshot import snapshot
from oomdoctor.cli.streams import silence
from oomdoctor.cli.watch import watch

__all__ = [
    "COMPLETE_VAR",
    "EXIT_INPUT",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_OOM",
    "EXIT_USAGE",
    "cli",
    "main",
]

#: The environment variable click reads for shell completion (README: Shell completion).
COMPLETE_VAR = "_OOMDOCTOR_COMPLETE"


class _Group(click.Group):
    """The ``cli`` group: a reader that went away (``rules list | head``) ends a command quietly
    with status 0 (click itself would exit 1); diagnose and plan catch it themselves and exit
    with their verdict's status."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _quiet_pipe():  # --help and --version print here
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> object:
        with _quiet_pipe():
            return super().invoke(ctx)


@contextlib.contextmanager
def _quiet_pipe() -> Iterator[None]:
    """A reader that went away: stdout is silenced and the command ends with status 0."""
    try:
        yield
    except BrokenPipeError:
        silence(sys.stdout)
        raise click.exceptions.Exit(EXIT_OK) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oomdoctor")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Why did the SGLang (or vLLM) server run out of GPU memory, and what should change?

    Exit codes: 0 no OOM found, 1 an OOM was diagnosed, 2 usage error,
    3 unreadable or empty input, unwritable output, or invalid rule files, 70 internal error.
    """
    ctx.obj = {"debug": debug}


cli.add_command(diagnose)
cli.add_command(watch)
cli.add_command(snapshot)
cli.add_command(plan)
cli.add_command(rules)


def main() -> None:
    """Console entry point: usage errors exit 2, bugs exit 70 with a short message."""
    from oomdoctor.cli.streams import reserve_standard_fds

    reserve_standard_fds()
    try:
        _main("--debug" in sys.argv[1:])
    except SystemExit as exc:
        sys.exit(_flushed(exc.code))
    sys.exit(_flushed(EXIT_OK))  # pragma: no cover - _main always exits


def _main(debug: bool) -> None:
    try:
        # The name and the completion variable are fixed, so that `python -m oomdoctor` prints
        # the same shell-completion script as the console script
        # (`_OOMDOCTOR_COMPLETE=bash_source oomdoctor`); click exits after printing it.
        cli.main(prog_name="oomdoctor", complete_var=COMPLETE_VAR, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        say("interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        try:
            _show_click_error(exc)
        except OSError:
            silence(sys.stderr)
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except BrokenPipeError:  # outside a command (shell-completion output): stop quietly
        silence(sys.stdout)
        sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except OSError as exc:  # the environment (a full disk, a vanished file), not a bug
        if debug:
            raise
        where = f"{exc.filename}: " if isinstance(exc.filename, str) else ""
        say(f"{where}{exc.strerror or exc}")
        sys.exit(EXIT_INPUT)
    except Exception as exc:  # a bug: say so briefly, traceback only on request
        if debug:
            raise
        say(f"internal error: {type(exc).__name__}: {exc} (oomdoctor {__version__})")
        say("rerun with --debug for the traceback and report it with the log", prefix="hint: ")
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_OK)


def _show_click_error(exc: click.ClickException) -> None:
    """click's usage error, through the terminal filter: it quotes the file names and option
    values it was given, and those must not act on the terminal."""
    import io

    from oomdoctor.report.terminal import safe_lines

    buffer = io.StringIO()
    exc.show(file=buffer)
    click.echo(safe_lines(buffer.getvalue()), err=True, nl=False)


def _flushed(code: int | str | None) -> int | str | None:
    """``code``, after flushing what stdout still buffers: a reader that went away changes
    nothing, an output that fails turns a verdict into exit 3 (not Python's exit 120)."""
    stream = sys.stdout
    if stream is None:
        return code
    try:
        stream.flush()
    except BrokenPipeError:
        silence(stream)
    except OSError as exc:
        silence(stream)
        say(f"cannot write to standard output: {exc.strerror or exc}")
        return EXIT_INPUT if code in (None, EXIT_OK, EXIT_OOM) else code
    except ValueError:  # a stream closed under us: nothing left to flush
        pass
    return code
