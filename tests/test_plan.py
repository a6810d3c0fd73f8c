"""`oomdoctor plan`: the DESIGN §2 worked example, defaults per card, and one budget object."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from tests.conftest import FIXTURES


def plan(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["plan", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("pre", "y", "kv", "status"),
    [("78GiB", "0.70", -5.4, 1), ("78GiB", "0.85", 6.3, 0), ("96GiB", "0.70", 7.2, 0)],
)
def test_worked_example_json(pre: str, y: str, kv: float, status: int) -> None:
    code, out, _ = plan(
        "--pre-load-memory",
        pre,
        "--weights",
        "60GiB",
        "--mem-fraction-static",
        y,
        "--format",
        "json",
    )
    assert code == status
    assert json.loads(out)["budget"]["kv_gib"] == pytest.approx(kv, abs=0.05)


def test_worked_example_text() -> None:
    code, out, _ = plan(
        "--pre-load-memory", "78GiB", "--weights", "60GiB", "--mem-fraction-static", "0.70"
    )
    assert code == 1
    assert out.startswith("will not start")
    assert "-5.40 GiB" in out
    code, out, _ = plan(
        "--pre-load-memory", "78GiB", "--weights", "60GiB", "--mem-fraction-static", "0.85"
    )
    assert "6.30 GiB" in out


def test_plan_and_diagnose_share_the_budget_object() -> None:
    _, out, _ = plan(
        "--pre-load-memory",
        "78GiB",
        "--weights",
        "60GiB",
        "--mem-fraction-static",
        "0.70",
        "--format",
        "json",
    )
    planned = json.loads(out)["budget"]
    log = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
    diagnosed = json.loads(
        CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json", "--no-gpu"]).stdout
    )["budget"]
    assert planned.keys() == diagnosed.keys()
    for key in ("pre_gib", "post_gib", "weights_gib", "mem_fraction_static", "kv_gib", "y_zero"):
        assert planned[key] == pytest.approx(diagnosed[key], abs=1e-6), key


def test_default_fraction_follows_sglang_for_the_card() -> None:
    _, out, _ = plan(
        "--gpu",
        "H100-80G",
        "--weights",
        "15GiB",
        "--kv-bytes-per-token",
        "131072",
        "--format",
        "json",
    )
    data = json.loads(out)
    assert data["budget"]["mem_fraction_static"] == 0.83  # reference §4.1: H100-80G TP1
    assert "default" in data["budget"]["mem_fraction_source"]
    _, out, _ = plan("--gpu", "H100-80G", "--tp", "8", "--weights", "15GiB", "--format", "json")
    assert json.loads(out)["budget"]["mem_fraction_static"] == 0.812
    _, out, _ = plan(
        "--gpu", "H200", "--weights", "15GiB", "--sglang-version", "0.5.2", "--format", "json"
    )
    assert json.loads(out)["budget"]["mem_fraction_static"] == 0.911


def test_tokens_and_concurrency() -> None:
    _code, out, _ = plan(
        "--gpu-mem",
        "81559MiB",
        "--weights",
        "15GiB",
        "--kv-bytes-per-token",
        "131072",
        "--context-length",
        "131072",
        "--mem-fraction-static",
        "0.8",
        "--format",
        "json",
    )
    data = json.loads(out)
    b = data["budget"]
    pre = 81559 / 1024 - 1.35
    kv = pre - 15 - 0.2 * pre
    assert b["kv_gib"] == pytest.approx(kv, abs=0.01)
    assert b["kv_tokens"] == int(kv * 2**30 // 131072)
    assert data["plan"]["concurrency_at_context"] == pytest.approx(
        b["kv_tokens"] / 131072, abs=0.01
    )
    assert b["y_min"] <= b["y_max"] and data["plan"]["verdict"] in ("fine", "thin_headroom")


def test_empty_window_is_reported() -> None:
    _, out, _ = plan(
        "--gpu",
        "L4",
        "--weights",
        "19GiB",
        "--kv-bytes-per-token",
        "131072",
        "--context-length",
        "32768",
        "--format",
        "json",
    )
    b = json.loads(out)["budget"]
    assert b["window_empty"] is True and b["y_min"] > b["y_max"]


def test_launch_command_and_svg(tmp_path: Path) -> None:
    svg = tmp_path / "card.svg"
    _, out, _ = plan(
        "--gpu",
        "H100-80G",
        "--weights",
        "60GiB",
        "--mem-fraction-static",
        "0.7",
        "--context-length",
        "8192",
        "--svg",
        str(svg),
        "--format",
        "markdown",
    )
    assert "python -m sglang.launch_server" in out and "--context-length 8192" in out
    root = ET.fromstring(svg.read_text())
    assert root.tag.endswith("svg") and len(root.findall("{http://www.w3.org/2000/svg}rect")) >= 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--weights", "60GiB"), "give the card"),
        (("--gpu", "H100-80G"), "give the model"),
        (("--gpu", "Voodoo5"), "unknown card"),
        (("--gpu-mem", "lots", "--weights", "1"), "cannot read 'lots' as a size"),
        (("--gpu", "H100-80G", "--model", "/nonexistent/config.json"), "no such file"),
    ],
)
def test_plan_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    code, out, err = plan(*args)
    assert code in (2, 3) and out == ""
    assert message in err.splitlines()[0] and "Traceback" not in err
