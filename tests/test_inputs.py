"""Odd inputs end in a verdict or a one-line error, never a traceback (more in the issue-6 suite)."""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

from click.testing import CliRunner

from oomdoctor.cli import cli
from oomdoctor.read.sources import MAX_LINE
from tests.conftest import FIXTURES

Y070 = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"


def _json(path: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["diagnose", str(path), "--format", "json"])
    assert "Traceback" not in result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_random_binary(tmp_path: Path) -> None:
    blob = tmp_path / "core.bin"
    blob.write_bytes(os.urandom(300_000))
    code, rep = _json(blob)
    assert code == 0 and rep["verdict"]["category"] == "unknown"


def test_empty_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    result = CliRunner().invoke(cli, ["diagnose", str(empty), "--format", "json"])
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr == f"oomdoctor: {empty} is empty: nothing to diagnose\n"


def test_invalid_utf8_and_nul_bytes_around_real_lines(tmp_path: Path) -> None:
    dirty = tmp_path / "dirty.log"
    dirty.write_bytes(
        b"\xff\xfe\x00garbage\x80\x81\n" + Y070.read_bytes().replace(b"\n", b"\x00\n", 5)
    )
    code, rep = _json(dirty)
    assert code == 1 and rep["budget"]["kv_gib"] == -5.4


def test_giant_line_is_cut_and_the_rest_still_read(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    with big.open("wb") as fh:
        fh.write(b"x" * (3 * MAX_LINE) + b"\n")
        fh.write(Y070.read_bytes())
    code, rep = _json(big)
    assert code == 1
    assert rep["budget"]["pre_gib"] == 78.0
    assert any("longer than 1 MiB" in n for n in rep["notices"])


def test_utf16_file(tmp_path: Path) -> None:
    wide = tmp_path / "wide.log"
    wide.write_bytes(codecs.BOM_UTF16_LE + Y070.read_text().encode("utf-16-le"))
    code, rep = _json(wide)
    assert code == 1 and rep["budget"]["kv_gib"] == -5.4


def test_windows_line_endings(tmp_path: Path) -> None:
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(Y070.read_bytes().replace(b"\n", b"\r\n"))
    code, rep = _json(crlf)
    assert code == 1 and rep["budget"]["kv_gib"] == -5.4
    assert rep["findings"][0]["evidence"][-1]["line"] == 44


def test_line_numbers_count_newlines_not_carriage_returns() -> None:
    _code, rep = _json(Y070)
    oom_line = rep["failure"]["where"]["line"]
    assert (
        Y070.read_bytes().split(b"\n")[oom_line - 1].startswith(b"RuntimeError: Not enough memory")
    )
