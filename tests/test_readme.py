"""The README shows what the tool really does (issue 21, item 5): its example block is the real
output of the command it shows, and it is written for users (development notes live in
docs/DEVELOPMENT.md). ``pytest --bless`` rewrites the example from the current output."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
#: The README's example: a ``text`` block whose first line is ``$ oomdoctor diagnose ...``.
EXAMPLE = re.compile(r"```text\n\$ (oomdoctor diagnose [^\n]*)\n(.*?)```\n", re.DOTALL)
FRESH_MACHINE = (
    "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/oomdoctor diagnose "
    "--exit-zero fixtures/sglang-0.5.2/worked-example-y070.log\n"
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest\n"
)


def real_output(command: str) -> str:
    """What ``command`` prints into a pipe, as a user's shell would run it from the repository."""
    args = shlex.split(command)
    assert args[0] == "oomdoctor" and "|" not in args and ">" not in args, command
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR")}
    done = subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args[1:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1) and not done.stderr, done.stderr
    return done.stdout


def test_the_readme_example_is_the_real_output(request: pytest.FixtureRequest) -> None:
    text = README.read_text("utf-8")
    match = EXAMPLE.search(text)
    assert match, "README.md has no `$ oomdoctor diagnose ...` example block"
    command, shown = match.group(1), match.group(2)
    output = real_output(command)
    if request.config.getoption("--bless") and shown != output:
        README.write_text(text[: match.start(2)] + output + text[match.end(2) :], "utf-8")
        return
    assert shown == output, (
        "README.md's example is stale: run `pytest --bless tests/test_readme.py`"
    )
    assert "What to change" in output and "Evidence" in output  # the whole report, not a head


def test_the_readme_starts_with_the_two_fresh_machine_commands() -> None:
    head = README.read_text("utf-8").split("```sh\n", 1)[1].split("```", 1)[0]
    assert head == FRESH_MACHINE


def test_the_readme_is_for_users() -> None:
    text = README.read_text("utf-8")
    assert not re.search(r"(?i)\bissues? \d+|\bissue #?\d+", text), "an issue number"
    assert "bench/" not in text and "--bless" not in text  # development notes: docs/
    dev = (REPO / "docs" / "DEVELOPMENT.md").read_text("utf-8")
    assert "bench/run.py" in dev and "--bless" in dev
