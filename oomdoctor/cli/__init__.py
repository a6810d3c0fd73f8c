"""Command line. The only package that touches stdin/stdout/stderr, files and exit codes.

This module is the face of the package: the ``cli`` group, the console entry point ``main()``
and the exit codes. Each command lives in a module of its own and is attached here; the command
modules never import this one, so there is no import cycle.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from oomdoctor import __version__
from oomdoctor.cli.common import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_OOM,
    EXIT_USAGE,
)
from oomdoctor.cli.diagnose import diagnose
from oomdoctor.cli.plan import plan
from oomdoctor.cli.rules import rules
from oomdoctor.cli.snapshot import snapshot
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oomdoctor")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Why did the SGLang (or vLLM) server run out of GPU memory, and what should change?

    Exit codes: 0 no OOM found, 1 an OOM was diagnosed, 2 usage error,
    3 unreadable or empty input, or invalid rule files, 70 internal error.
    """
    ctx.obj = {"debug": debug}


cli.add_command(diagnose)
cli.add_command(watch)
cli.add_command(snapshot)
cli.add_command(plan)
cli.add_command(rules)


def main() -> None:
    """Console entry point: usage errors exit 2, bugs exit 70 with a short message."""
    debug = "--debug" in sys.argv[1:]
    try:
        # The name and the completion variable are fixed, so that `python -m oomdoctor` prints
        # the same shell-completion script as the console script
        # (`_OOMDOCTOR_COMPLETE=bash_source oomdoctor`); click exits after printing it.
        cli.main(prog_name="oomdoctor", complete_var=COMPLETE_VAR, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("oomdoctor: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, like other Unix tools.
        try:
            sys.stdout = Path(os.devnull).open("w")  # noqa: SIM115 - lives until exit
        finally:
            sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        click.echo("oomdoctor: interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # a bug: say so briefly, traceback only on request
        if debug:
            raise
        click.echo(
            f"oomdoctor: internal error: {type(exc).__name__}: {exc} (oomdoctor {__version__})",
            err=True,
        )
        click.echo(
            "hint: rerun with --debug for the traceback and report it with the log", err=True
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_OK)
