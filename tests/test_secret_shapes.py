"""The token-prefix table the redactor loads is what tools/gen_secret_shapes.py makes of the
recorded detect-secrets patterns and the overrides, and every shape in it stays linear."""

from __future__ import annotations

import json
import re
from pathlib import Path

from oomdoctor.report.secrets import mask
from tools import gen_secret_shapes as gen


def _build() -> dict[str, object]:
    recorded = json.loads(gen.RECORDED.read_text("utf-8"))
    return gen.build(recorded, gen.load_overrides())


def test_the_checked_in_table_is_the_generators_output() -> None:
    assert gen.TABLE.read_text("utf-8") == gen.dumps(_build()), (
        "oomdoctor/report/token_prefixes.json is stale: run python tools/gen_secret_shapes.py"
    )


def test_every_detector_is_taken_or_skipped_with_a_reason() -> None:
    recorded = json.loads(gen.RECORDED.read_text("utf-8"))
    table = _build()
    ids = {s["id"] for s in table["shapes"]} | {s["id"] for s in table["skipped"]}  # type: ignore[attr-defined]
    for det in recorded["detectors"]:
        for i, _ in enumerate(det["patterns"]):
            assert f"{det['class']}#{i}" in ids
    assert all(s["reason"] for s in table["skipped"])  # type: ignore[attr-defined]
    assert all(s["source"] for s in table["shapes"])  # type: ignore[attr-defined]


def test_every_shape_has_a_literal_prefix_and_no_open_repeat() -> None:
    for shape in _build()["shapes"]:  # type: ignore[attr-defined]
        assert gen.literal_head(shape["pattern"]) >= 2, shape
        assert not gen.has_open_repeat(shape["pattern"]), shape
        re.compile(shape["pattern"])


def test_capping_leaves_classes_alone() -> None:
    assert gen.capped(r"eyJ[A-Za-z0-9-_.+/=]*?x+") == r"eyJ[A-Za-z0-9-_.+/=]{0,256}?x{1,256}"
    assert gen.capped(r"a[\]+]{3,}(?:\d+-)+") == r"a[\]+]{3,256}(?:\d{1,256}-){1,256}"


def test_extraction_reads_literals_formats_and_loops(tmp_path: Path) -> None:
    pkg = tmp_path / "detect_secrets"
    (pkg / "plugins").mkdir(parents=True)
    (pkg / "__version__.py").write_text("VERSION = '9.9'\n")
    (pkg / "plugins" / "x.py").write_text(
        "import re\n"
        "class XDetector:\n"
        "    secret_type = 'X Token'\n"
        "    word = r'(?:key|pw)'\n"
        "    denylist = [\n"
        "        re.compile(r'xt_[a-z]{8}'),\n"
        "        re.compile(r'x{w}=[a-z]+'.format(w=word), flags=re.IGNORECASE),\n"
        "    ]\n"
        "class YDetector:\n"
        "    secret_type = 'Y Key'\n"
        "    denylist = [re.compile(r) for r in ('BEGIN X', 'BEGIN Y')]\n"
    )
    got = gen.extract(pkg)
    assert got["source"] == "detect-secrets 9.9"
    assert [(d["class"], d["secret_type"]) for d in got["detectors"]] == [
        ("XDetector", "X Token"),
        ("YDetector", "Y Key"),
    ]
    assert got["detectors"][0]["patterns"] == [
        {"pattern": "xt_[a-z]{8}", "flags": []},
        {"pattern": "x(?:key|pw)=[a-z]+", "flags": ["IGNORECASE"]},
    ]
    assert [p["pattern"] for p in got["detectors"][1]["patterns"]] == ["BEGIN X", "BEGIN Y"]


def test_the_table_masks_a_sample_of_each_added_prefix() -> None:
    samples = {
        "hugging-face": "hf_" + "Ab1" * 8,
        "google-oauth": "ya29." + "Ab1_" * 6,
        "nvidia": "nvapi-" + "Ab1-" * 6,
        "groq": "gsk_" + "Ab1" * 8,
        "vault": "hvs." + "Ab1" * 8,
        "replicate": "r8_" + "Ab1" * 8,
        "langsmith": "lsv2_pt_" + "Ab1" * 8,
        "age": "AGE-SECRET-KEY-1" + "QZ2" * 10,
        "stripe": "sk_test_" + "Ab1" * 8,
    }
    for name, token in samples.items():
        assert mask(f"x {token} y")[0] == "x <redacted> y", name
    assert mask("xhf_" + "Ab1" * 8)[0].startswith("xhf_")  # inside a longer word: kept
