"""Secrets planted where real logs carry them never reach a report (DESIGN §6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from oomdoctor.report.redact import MASK, Redactor

SECRETS = {
    "api": "sk-PLANTEDapiKEY0123456789abcdef",
    "admin": "PLANTEDadminSecretValue42",
    "ssl": "PLANTEDsslPassphrase7",
    "hf": "hf_PLANTEDabcdefghijklmnopqrstuvwx",
    "gh": "ghp_PLANTEDabcdefghijklmnopqrstuvwx1234",
    "aws": "AKIAPLANTED000000000",
    "bearer": "PLANTEDbearerTokenValue0123456",
    "urlpw": "PLANTEDurlPassword9",
    "extra": "PLANTEDextraConfigSecret",
}


def _log(dict_form: bool) -> str:
    s = SECRETS
    if dict_form:
        args = (
            f"server_args={{'model_path': '/models/Llama', 'api_key': '{s['api']}', "
            f"'admin_api_key': '{s['admin']}', 'ssl_keyfile_password': '{s['ssl']}', "
            f"'hicache_storage_backend_extra_config': '{{\"secret\": \"{s['extra']}\"}}', "
            f"'mem_fraction_static': 0.7, 'tp_size': 1}}"
        )
    else:
        args = (
            f"server_args=ServerArgs(model_path='/models/Llama', api_key='{s['api']}', "
            f"admin_api_key='{s['admin']}', ssl_keyfile_password='{s['ssl']}', "
            f"model_loader_extra_config={{'token': '{s['extra']}'}}, mem_fraction_static=0.7, tp_size=1)"
        )
    return "\n".join(
        [
            f"[2025-09-22 08:14:03] {args}",
            f"[2025-09-22 08:14:03] HF_TOKEN={s['hf']} GITHUB={s['gh']} AWS_ACCESS_KEY_ID={s['aws']}",
            f"[2025-09-22 08:14:04] Downloading from https://user:{s['urlpw']}@mirror.example/models",
            "[2025-09-22 08:14:14] Load weight begin. avail mem=78.00 GB",
            "[2025-09-22 08:14:53] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=18.00 GB, mem usage=60.00 GB.",
            "[2025-09-22 08:14:53] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sglang/srt/model_executor/model_runner.py", line 1317, in init_memory_pool',
            "    raise RuntimeError(",
            f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Authorization: Bearer {s['bearer']} --api-key {s['api']}",
        ]
    )


@pytest.mark.parametrize("dict_form", [False, True], ids=["ServerArgs", "dict"])
@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_no_planted_secret_in_any_format(tmp_path: Path, dict_form: bool, fmt: str) -> None:
    log = tmp_path / "server.log"
    log.write_text(_log(dict_form))
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--format", fmt])
    assert result.exit_code == 1, result.output
    for name, secret in SECRETS.items():
        assert secret not in result.output, f"{name} leaked in {fmt}"
    if fmt == "json":
        assert json.loads(result.output)["redactions"] > 0


def test_no_redact_keeps_text(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_log(False))
    result = CliRunner().invoke(cli, ["diagnose", str(log), "--format", "json", "--no-redact"])
    assert SECRETS["bearer"] in result.output
    assert json.loads(result.output)["redactions"] == 0


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("api_key='abc123456'", "abc123456"),
        ("'api_key': 'abc123456'", "abc123456"),
        ('"admin_api_key": "abc123456"', "abc123456"),
        ("ssl_keyfile_password=hunter2hunter2", "hunter2hunter2"),
        ("curl -H 'Authorization: Bearer abcdefghijklmnop'", "abcdefghijklmnop"),
        ("postgres://svc:s3cr3tpw@db:5432/x", "s3cr3tpw"),
        ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstu", "sk-proj-abcdefghijklmnopqrstu"),
        ("--api-key mykey12345", "mykey12345"),
        ("model_loader_extra_config={'a': {'b': 'deep'}, 'k': 'v'}", "deep"),
    ],
)
def test_patterns(text: str, secret: str) -> None:
    r = Redactor()
    out = r.text(text)
    assert secret not in out and MASK in out
    assert r.count == 1


@pytest.mark.parametrize(
    "text",
    ["api_key=None", "'api_key': None", "admin_api_key=''", "token usage: 0.95", "sk-short"],
)
def test_non_secrets_are_untouched(text: str) -> None:
    r = Redactor()
    assert r.text(text) == text
    assert r.count == 0


def test_watch_and_follow_reports_are_redacted_but_the_pass_through_is_not(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    log = tmp_path / "server.log"
    log.write_text(_log(True) + "\n")
    report_file = tmp_path / "report.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomdoctor",
            "watch",
            "--no-gpu",
            "-o",
            str(report_file),
            "--format",
            "markdown",
            "--",
            sys.executable,
            str(REPO / "tests" / "fake_server.py"),
            str(log),
            "--one-stream",
        ],
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    passed, _, summary = proc.stderr.partition(b"-- oomdoctor --")
    assert SECRETS["api"].encode() in passed  # the server's own output is never altered
    for secret in SECRETS.values():
        assert secret.encode() not in summary
        assert secret not in report_file.read_text()
    follow = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "diagnose", "--follow", "--tee", "--no-gpu"],
        input=log.read_bytes(),
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    assert follow.stdout == log.read_bytes()
    for secret in SECRETS.values():
        assert secret.encode() not in follow.stderr


def test_snapshot_command_lines_are_redacted() -> None:
    from oomdoctor.gpu.snapshot import Process, Snapshot, to_json

    snap = Snapshot(
        "nvml",
        None,
        None,
        None,
        None,
        (),
        (
            Process(
                1,
                "GPU-x",
                None,
                1,
                "python3",
                f"python3 -m sglang.launch_server --api-key {SECRETS['api']}",
            ),
        ),
    )
    r = Redactor()
    assert SECRETS["api"] not in json.dumps(r.walk(to_json(snap)))
    assert r.count == 1
