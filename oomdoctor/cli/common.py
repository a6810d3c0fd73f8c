"""What several commands share: exit codes, failing with a hint, loading the rules, writing output.

Only ``click`` and the standard library are imported here at module level; the pipeline and the
report modules are imported inside the functions that need them, so ``oomdoctor --help`` stays
light.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from oomdoctor.cli.streams import OutputError, same_file, silence, write_file, write_stream

_F = TypeVar("_F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_OOM = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INTERNAL = 70

#: ``--rules DIR`` as watch, ``rules list`` and ``rules show`` take it.
rules_option = click.option(
    "--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add the rules in DIR."
)


def format_option(help: str | None = "Report format.") -> Callable[[_F], _F]:
    """``--format text|markdown|json`` (diagnose, watch, plan)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "markdown", "json"]),
        default="text",
        show_default=True,
        help=help,
    )


#: ``--color``'s choices; ``auto`` is the default.
COLOR_CHOICES = ("auto", "always", "never")


def color_option() -> Callable[[_F], _F]:
    """``--color auto|always|never`` (diagnose, watch, plan): decided by :func:`use_color`."""
    return click.option(
        "--color",
        "color",
        type=click.Choice(COLOR_CHOICES),
        default="auto",
        show_default=True,
        help="Colour the terminal report: auto (on a terminal, unless NO_COLOR is set or "
        "TERM=dumb; FORCE_COLOR forces it), always (also through a pipe), never. "
        "Files written with -o never get colour.",
    )


def use_color(choice: str, stream: Any) -> bool:
    """Whether a report written to ``stream`` gets colour, for ``--color`` ``choice``.

    ``always`` and ``never`` beat the environment. ``auto``: a non-empty ``NO_COLOR``
    (no-color.org) turns colour off; else a ``FORCE_COLOR`` that is non-empty and not ``0``
    turns it on even through a pipe; else ``TERM=dumb`` turns it off; else colour iff
    ``stream`` is a terminal. Never give it the stream of an ``-o`` file: files get no colour.
    """
    if choice == "always":
        return True
    if choice == "never":
        return False
    env = os.environ
    if env.get("NO_COLOR"):
        return False
    force = env.get("FORCE_COLOR")
    if force and force != "0":
        return True
    if env.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def is_terminal(stream: Any) -> bool:
    """``stream.isatty()``, and False for a stream that cannot say (closed, replaced)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def complete_files(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion for a file argument (LOG, -o FILE): the shell lists the files."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="file")]


#: ``--no-redact`` as diagnose and watch take it.
no_redact_option = click.option(
    "--no-redact", is_flag=True, help="Do not mask API keys, tokens and passwords."
)


def fail(message: str, hint: str | None = None, code: int = EXIT_INPUT) -> NoReturn:
    """Say what went wrong (and what to do) on stderr, and exit with ``code``."""
    say(message)
    if hint:
        say(hint, prefix="hint: ")
    sys.exit(code)


def say(message: str, prefix: str = "oomdoctor: ") -> None:
    """One line on stderr, redacted and visible (it may echo a path or a log's text: always
    redacted, even with --no-redact, which is about the report). A stderr that is closed, full
    or gone is silenced: the exit code still says what happened."""
    try:
        click.echo(f"{prefix}{redact_line(message)}", err=True)
    except OSError:
        silence(sys.stderr)


def redact_line(text: str) -> str:
    """``text`` for a message on stderr: secrets masked, control characters and newlines shown
    (``report.terminal``), so a file name cannot write to the clipboard or forge a line."""
    from oomdoctor.report.terminal import safe_line

    return safe_line(text)


def refuse_overwrite(
    output: str | None, option: str, inputs: Iterable[str], what: str = "an input"
) -> None:
    """Exit 2 when ``output`` (``-o FILE``, ``--svg FILE``) names one of ``inputs`` (``what``
    they are, for the message); run before anything is read or started."""
    if not output or output == "-":
        return
    for name in inputs:
        if name and name != "-" and same_file(output, name):
            fail(
                f"{option} {output} is also {what}: refusing to overwrite it",
                f"give {option} another file name",
                EXIT_USAGE,
            )


def load_rules(rule_dirs: tuple[str, ...]) -> Any:
    """The built-in rules plus those in ``rule_dirs``."""
    return load_rules_and_knowledge(rule_dirs)[0]


def load_rules_and_knowledge(rule_dirs: tuple[str, ...]) -> tuple[Any, Any]:
    """The rules and the knowledge tables (engine markers, site marks) of the built-in set plus
    the user's directories; every problem in every file is reported before failing."""
    from oomdoctor.knowledge import KnowledgeError
    from oomdoctor.pipeline import load_knowledge
    from oomdoctor.pipeline import load_rules as load_rule_files
    from oomdoctor.rules.schema import RuleError

    dirs = [Path(d) for d in rule_dirs]
    problems: list[str] = []
    rules = knowledge = None
    try:
        rules = load_rule_files(dirs)
    except RuleError as exc:
        problems.extend(exc.problems)
    try:
        knowledge = load_knowledge(dirs)
    except KnowledgeError as exc:
        problems.extend(exc.problems)
    if problems:
        for problem in problems:
            say(problem)
        fail(
            f"{len(problems)} problem(s) in rule files",
            "each rule file is documented in README.md (Writing a rule); "
            "`oomdoctor rules features` lists the names conditions can use",
        )
    return rules, knowledge


def write_output(text: str, output: str | None, strict: bool = True) -> bool:
    """Write ``text`` to the file ``output`` (whole: see streams.write_file), or to stdout when it
    is None or ``-``. False when stdout's reader went away (``| head``): the caller exits as it
    would have. An output that cannot be written is a one-line error, exit 3, or with
    ``strict=False`` a one-line warning (and False)."""
    if output and output != "-":
        return write_text(text, output, None, strict)
    return write_text(text, None, sys.stdout, strict)


def write_text(text: str, output: str | None, stream: Any, strict: bool = True) -> bool:
    """``text`` to the file ``output``, else to ``stream`` (stdout or stderr); see write_output."""
    try:
        if output:
            write_file(output, text)
            return True
        name = "standard error" if stream is sys.stderr else "standard output"
        return write_stream(stream, text, name)
    except OutputError as exc:
        if strict:
            fail(str(exc), code=EXIT_INPUT)
        say(f"warning: {exc}")
        return False


def terminal_width() -> int:
    """The terminal's width in columns."""
    import shutil  # only a terminal needs it (shutil pulls in the compression modules)

    return shutil.get_terminal_size().columns


#: The text report's width where no terminal says (a pipe, a file) and ``COLUMNS`` is unset.
DEFAULT_WIDTH = 100


def report_width(stream: Any, to_stream: bool) -> int:
    """The width to wrap a text report at: the terminal's, else a positive ``COLUMNS`` (also
    through a pipe or into ``-o FILE``), else DEFAULT_WIDTH; never below 60."""
    if to_stream and is_terminal(stream):
        return max(terminal_width(), 60)
    columns = os.environ.get("COLUMNS", "").strip()
    return max(int(columns), 60) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def write_svg(data: dict[str, Any], svg: str | None) -> None:
    """Draw the report's picture of the card into an SVG file and point the report at it."""
    if not svg:
        return
    pic = data.get("picture")
    if not pic:
        say("no picture to draw: the log lacks the memory numbers")
        return
    from oomdoctor.report import picture

    rows = [(f"now: --mem-fraction-static {pic['before']['y']:.2f}", pic["before"])]
    if pic.get("after"):
        rows.append((f"recommended: --mem-fraction-static {pic['after']['y']:.2f}", pic["after"]))
    write_text(picture.svg(rows), svg, None)
    pic["svg"] = svg


def emit_report(
    diagnosis: Any,
    fmt: str,
    output: str | None,
    no_redact: bool,
    svg: str | None,
    stream: Any,
    color: str = "auto",
    strict: bool = True,
) -> bool:
    """Build, redact and render the report; write it to ``output`` or to ``stream``.

    ``color`` is the ``--color`` choice; it applies to ``stream`` only, never to a file. Returns
    what :func:`write_text` returns (``strict``: an unwritable output exits 3).
    """
    from oomdoctor.report.build import build_report
    from oomdoctor.report.redact import redact_report
    from oomdoctor.report.render import render

    data = build_report(diagnosis)
    if not no_redact:
        data = redact_report(data, fmt)
    write_svg(data, svg)
    to_stream = not output or output == "-"
    colour = to_stream and use_color(color, stream)
    text = render(data, fmt, color=colour, width=report_width(stream, to_stream))
    return write_text(text, output if not to_stream else None, stream, strict)
