"""Output for tickets (issue 21, item 5), as a user meets it: ``-o`` to a device or a FIFO, text
through a pipe that honours ``COLUMNS`` and has no trailing spaces."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

WORKED = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
RUNTIME = FIXTURES / "sglang-0.4.6" / "runtime-overlap-thread-oom.log"


def oomdoctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a real process, its stdout and stderr pipes (not terminals)."""
    full = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=full,
        timeout=120,
        check=False,
    )


def test_o_dev_stdout_writes_into_the_pipe() -> None:
    plain = oomdoctor("diagnose", "--no-gpu", str(WORKED))
    done = oomdoctor("diagnose", "--no-gpu", "-o", "/dev/stdout", str(WORKED))
    assert done.returncode == plain.returncode == 1, done.stderr
    assert done.stderr == "" and done.stdout == plain.stdout
    assert done.stdout.startswith("startup_kv_alloc")


def test_o_dev_stderr_writes_into_the_pipe() -> None:
    done = oomdoctor("diagnose", "--no-gpu", "--format", "json", "-o", "/dev/stderr", str(WORKED))
    assert done.returncode == 1 and done.stdout == ""
    assert '"schema_version": 1' in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_o_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = oomdoctor("diagnose", "--no-gpu", "--format", "markdown", "-o", str(fifo), str(WORKED))
    reader.join(30)
    assert done.returncode == 1, done.stderr
    assert got and got[0].decode("utf-8").startswith("## oomdoctor: ")
    assert fifo.exists() and not [p for p in tmp_path.iterdir() if p.name != fifo.name]


@pytest.mark.parametrize("log", [WORKED, RUNTIME], ids=lambda p: p.name)
@pytest.mark.parametrize("columns", [64, 100, 150])
def test_piped_text_honours_columns_without_trailing_spaces(log: Path, columns: int) -> None:
    done = oomdoctor("diagnose", "--no-gpu", str(log), env={"COLUMNS": str(columns)})
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and len(lines) > 10
    assert [line for line in lines if line != line.rstrip()] == []
    assert max(len(line) for line in lines if " " in line.strip()) <= columns
    if columns == 150:  # a wide terminal gets wide rows, not the default 100
        assert max(len(line) for line in lines) > 100


def test_file_output_takes_columns_too(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    done = oomdoctor("diagnose", "--no-gpu", "-o", str(out), str(WORKED), env={"COLUMNS": "70"})
    assert done.returncode == 1, done.stderr
    lines = out.read_text("utf-8").splitlines()
    assert max(len(line) for line in lines if " " in line.strip()) <= 70
    assert all(line == line.rstrip() for line in lines)


SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    "log", [WORKED, FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"], ids=lambda p: p.name
)
def test_svg_shows_its_numbers_and_a_legend_of_what_is_drawn(log: Path, tmp_path: Path) -> None:
    import json
    import xml.etree.ElementTree as ET

    from oomdoctor.report import picture

    out = tmp_path / "card.svg"
    data = json.loads(oomdoctor("diagnose", "--no-gpu", "--format", "json", str(log)).stdout)
    done = oomdoctor("diagnose", "--no-gpu", "--svg", str(out), str(log))
    assert done.returncode == 1, done.stderr
    root = ET.fromstring(out.read_text("utf-8"))
    width = float(root.get("width") or 0)
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]
    shown = " ".join(texts)
    drawn: set[str] = set()
    for seg in (data["picture"]["before"], data["picture"]["after"] or {"parts": []}):
        for part in seg["parts"]:
            if part["gib"]:  # every drawn size is written on the picture, not only in a tooltip
                drawn.add(part["key"])
                assert f"{part['gib']:.2f} GiB" in shown, (part, texts)
    # the legend: one swatch per part drawn, each with its name, all inside the picture
    swatches = [r for r in root.iter(f"{SVG_NS}rect") if r.get("width") == "10"]
    names = {picture._SHORT[k] for k in drawn}
    assert len(swatches) == len(drawn) and names <= set(texts), (names, texts)
    for t in root.iter(f"{SVG_NS}text"):
        x = float(t.get("x") or 0)
        text = "".join(t.itertext())
        extent = len(text) * 7.0 / (2 if t.get("text-anchor") == "middle" else 1)
        assert x + extent <= width + 1, text


def test_the_text_card_legend_names_what_the_bar_draws() -> None:
    import re

    done = oomdoctor("diagnose", "--no-gpu", str(WORKED), env={"COLUMNS": "100"})
    card = done.stdout.split("The card\n", 1)[1].split("\n\n", 1)[0]
    rows = re.split(r"\n(?=after )", card)
    assert len(rows) == 2
    for row in rows:
        bar = re.search(r"\[([^\]]*)\]", row)
        assert bar
        drawn = set(bar.group(1)) - {" "}
        legend = " ".join(row[bar.end() :].split())
        named = set(re.findall(r"(?:^|; )(\S) \S", legend))
        assert named == drawn, (named, drawn, legend)
        assert all(len(line) <= 100 for line in row.splitlines())


@pytest.mark.parametrize("columns", [64, 150])
def test_piped_plan_text_honours_columns_without_trailing_spaces(columns: int) -> None:
    """`plan`'s text through a pipe as `diagnose`'s: COLUMNS wide, no line ending in spaces;
    a launch command stays on one line, to be copied whole."""
    model = FIXTURES / "configs" / "meta-llama--Llama-3.1-8B-Instruct"
    done = oomdoctor("plan", "--gpu", "L4", "--model", str(model), env={"COLUMNS": str(columns)})
    lines = done.stdout.splitlines()
    assert len(lines) > 5, done.stderr
    assert [line for line in lines if line != line.rstrip()] == []
    prose = [ln for ln in lines if " " in ln.strip() and "sglang.launch_server" not in ln]
    assert max(len(line) for line in prose) <= columns
    assert any(ln.strip().startswith("python -m sglang.launch_server") for ln in lines)
    if columns == 150:
        assert max(len(line) for line in lines) > 100
