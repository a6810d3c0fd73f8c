"""Sizes as people write them (issue 22 item 7): PiB and EiB, KB/kB = 10^3 bytes, KiB, scientific
notation (`1.6e1GiB`), decimal commas (`avail mem=70,50 GB`) and grouped thousands (`1,024`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor import units
from oomdoctor.cli import cli
from oomdoctor.extract.pytorch_oom import parse_oom
from tests.conftest import FIXTURES

Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"


@pytest.mark.parametrize(
    ("amount", "unit", "gib"),
    [
        ("1.6e1", "GiB", 16.0),
        ("1048576", "KiB", 1.0),
        ("1000000", "KB", 1e9 / 2**30),
        ("1000000", "kB", 1e9 / 2**30),
        ("0.0001", "PiB", 0.0001 * 2**20),
        ("1e-9", "EiB", 2**30 * 1e-9),
        ("70,50", "GB", 70.5),
        ("1,024", "MiB", 1.0),
        ("1,024.5", "MiB", 1024.5 / 1024),
    ],
)
def test_sizes_in_every_unit(amount: str, unit: str, gib: float) -> None:
    assert units.to_gib(amount, unit) == pytest.approx(gib)


def test_sizes_no_gpu_holds_are_refused() -> None:
    assert units.to_gib("16", "EiB") is None  # the wrapped size of a negative allocation
    assert units.to_gib("1e400", "GiB") is None
    assert units.decimal("1,2,4") is None  # a list, not a number


def test_an_oom_message_in_other_notations() -> None:
    oom = parse_oom(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.6e1GiB. GPU 0 has a "
        "total capacity of 79,19 GiB of which 512000 kB is free."
    )
    assert oom.requested_gib == pytest.approx(16.0)
    assert oom.total_gib == pytest.approx(79.19)
    assert oom.free_gib == pytest.approx(512000e3 / 2**30)
    assert parse_oom("Tried to allocate 0.5 PiB").requested_gib == pytest.approx(2**19)


def test_decimal_commas_in_sglang_memory_lines(tmp_path: Path) -> None:
    text = Y085.read_text()
    assert "avail mem=78.00 GB" in text
    for figure in ("78.00", "18.00", "11.57"):
        text = text.replace(f"avail mem={figure} GB", f"avail mem={figure.replace('.', ',')} GB")
    log = tmp_path / "comma.log"
    log.write_text(text)
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--no-gpu", "--format", "json"])
    rep = json.loads(result.stdout)
    assert rep["budget"]["pre_gib"] == pytest.approx(78.0)
    assert rep["budget"]["post_gib"] == pytest.approx(18.0)
    assert not any("Load weight begin/end" in n for n in rep["notices"])
