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
                f"python3 -m sglang.launch_server --api-key {SECRETS['api']} --hf-token "
                f"{SECRETS['hf']} --token {SECRETS['bearer']} --password {SECRETS['ssl']}",
            ),
        ),
    )
    r = Redactor()
    out = json.dumps(r.walk(to_json(snap)))
    assert not any(s in out for s in (SECRETS["api"], SECRETS["hf"], SECRETS["bearer"]))
    assert SECRETS["ssl"] not in out and "python3 -m sglang.launch_server --api-key" in out
    assert r.count == 4


# -- shapes, not names (issue 14) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567", "0123456789abcdef"),
        ("ANTHROPIC_API_KEY=abcDEF123ghiJKL456", "abcDEF123ghiJKL456"),
        ("DB_PASSWORD=hunter2", "hunter2"),
        ("MY_SECRET=opensesame", "opensesame"),
        ("AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3Q+abc==", "IQoJb3Jp"),
        ("SGLANG_API_KEY=xyz12345", "xyz12345"),
        ("API_KEY=abcdefg", "abcdefg"),
        ("HF_TOKEN=hf_x1", "hf_x1"),
        ('{"hf_token": "hf-short-1"}', "hf-short-1"),
        ("'client_secret': 'abc'", "'abc'"),
        ("x-api-key: abc123", "abc123"),
        ("X-Api-Key:abc123xyz", "abc123xyz"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("Cookie: session=abcdef123456", "abcdef123456"),
        ("https://h/x?token=abc", "abc"),
        ("https://h/x?a=1&sig=Zm9vYmFy", "Zm9vYmFy"),
        ("https://h/x?api_key=k1", "k1"),
        ("https://b.s3.amazonaws.com/m?X-Amz-Signature=abcdef0123456789", "abcdef0123456789"),
        ("https://b/m?X-Amz-Credential=AKIDEXAMPLE%2F20250101%2Fus-east-1", "AKIDEXAMPLE"),
        ("https://b/m?X-Amz-Security-Token=FwoGZXIvYXdzEBYaDH", "FwoGZXIvYXdzEBYaDH"),
        ("redis://:pw@h:6379", "pw@"),
        ("postgres://u:p@ss/w@rd@db:5432/x", "p@ss/w@rd"),
        ("mongodb+srv://admin:s3cr3t@cluster0.example.net/db", "s3cr3t"),
        ("https://maps.example/?key=AIzaSyA1234567890abcdefghijklmnopqrstu", "AIzaSy"),
        ("see AIzaSyA1234567890abcdefghijklmnopqrstu", "AIzaSy"),
        ("--token abc123", "abc123"),
        ("--password pw", "pw"),
        ("--hf-token hf_x1", "hf_x1"),
        ("--api-key=K9", "K9"),
        ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "sk-ant-api03"),
        ("glpat-abcdefghij1234567890", "glpat-ab"),
        ("npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm_abcd"),
        ("pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0", "pypi-AgE"),
        ("xoxb-1234567890-abcdefghij", "xoxb-123"),
        ("ASIAABCDEFGHIJKLMNOP", "ASIAABCD"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9", "eyJhbGci"),
        ("HF token: hf_abcdefghijklmnopqrstuvwxyz1234", "hf_abcde"),
        ("using token Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5", "Zm9vYmFy"),
        ("non-default args: {'model': 'x', 'api_key': ['k-123', 'k-456']}", "k-123"),
        ("""'json_model_override_args': '{"api_key": "inner123"}'""", "inner123"),
        ("export HF_TOKEN='hf_abcdef", "hf_abcdef"),  # a quote the line does not close
    ],
)
def test_shapes(text: str, secret: str) -> None:
    r = Redactor()
    out = r.text(text)
    assert secret not in out and MASK in out, out
    assert r.count == 1


@pytest.mark.parametrize(
    "text",
    [
        "max_total_tokens=100000",
        "'kv_cache_dtype': 'fp8_e4m3'",
        "#token: 1234",
        "#new-token: 8192, #cached-token: 0, token usage: 0.95",
        "tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto'",
        "'skip_tokenizer_init': False, 'page_size': 1, 'context_length': 32768",
        "new_token: 3, num_tokens=4096, keys: 12, key_dim=128",
        "'speculative_token_map': None, kt_max_deferred_experts_per_token=8",
        "tokenizer_metrics_custom_labels_header='x-custom-labels'",
        "{'key': 'lm_head'}",
        "'pad_token': '<|endoftext|>', 'bos_token': '<s>'",
        "    key = self.rotary_emb(positions, query, key)",
        "    token_to_kv_pool = self._build_token_to_kv_pool(",
        "Missing key: model.layers.0.weight",
        "custom_sigquit_handler=None, signum=15",
        "ssl_keyfile='/etc/ssl/server.key', api_key_file='/run/secrets/key'",
        "GPU-1b7e94c3-0d2f-6a58-c4e1-87f3a2d90b6c",
        "https://host:8080/v1/models@latest",
        "https://b/m?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20250101T000000Z&X-Amz-Expires=60",
        "'api_key': None, api_key='', 'api_key': [], API_KEY=EMPTY, password=***",
        "--max-total-tokens 100000 --disable-auth --tokenizer-path /models/x --new-token 3",
        "'author': 'me', authors=2",
    ],
)
def test_diagnostic_data_is_untouched(text: str) -> None:
    r = Redactor()
    assert r.text(text) == text
    assert r.count == 0


def test_every_shape_is_documented() -> None:
    from oomdoctor.extract.lazy import LazyPattern
    from oomdoctor.report.secrets import POLICIES, SHAPES

    for shape in SHAPES:
        pattern = shape.pattern
        if isinstance(pattern, LazyPattern):
            pattern = pattern.compiled()
        assert shape.name and shape.example and "value" in pattern.groupindex
        assert shape.judge in {"keyed", "userinfo", "always", "client", "prefix", *POLICIES}


def test_redact_text_is_for_messages() -> None:
    from oomdoctor.report.redact import redact_text

    msg = "cannot read /logs/run?token=abc123&x=1: No such file or directory"
    assert redact_text(msg) == f"cannot read /logs/run?token={MASK}&x=1: No such file or directory"


# -- cut after redaction, wrapped secrets, the count per format ------------------------------


def test_a_cut_never_splits_a_secret() -> None:
    from oomdoctor.report.redact import cut, redact_text

    head = "x" * 380 + " "
    short = head + "api_key='sk-abcdefghijklmnopqrstuvwxyz0123' and more " + "y" * 100
    kept = cut(short, 400)
    assert kept.endswith("0123'…")  # moved to the secret's end
    assert redact_text(kept).endswith(f"api_key='{MASK}'…")
    huge = head + "HF_TOKEN=" + "A1b2" * 300  # ends far past the slack: cut before it
    assert cut(huge, 400) == head + "…"
    assert cut("z" * 500, 400) == "z" * 400 + "…"
    assert cut("short", 400) == "short"


def test_a_cut_of_a_hostile_line_is_quick() -> None:
    import time

    from oomdoctor.report.redact import cut

    for line in ("api_key=x " * (1 << 17), "http://a:b" * (1 << 17), "token: " * (1 << 17)):
        start = time.perf_counter()
        cut(line, 400)
        assert time.perf_counter() - start < 1.0


def _ref(line: int, text: str) -> dict[str, object]:
    return {"source": "server.log", "line": line, "rank": None, "text": text}


def test_a_secret_wrapped_onto_the_next_line_is_masked_there_too() -> None:
    from oomdoctor.report.redact import redact_report

    report = {
        "findings": [
            {
                "evidence": [
                    _ref(5, "HF_TOKEN=hf_abcdefghijklmnopqrstuv"),
                    _ref(6, "wxyzABCDEF0123456789"),  # the rest, rewrapped by hand
                    _ref(7, "ghijklmnopqrstuvwxyz"),  # line 6 ended in a mask too
                    _ref(9, "Zm9vYmFyYmF6MTIz"),  # not adjacent: no continuation
                    _ref(10, "Traceback (most recent call last):"),
                ]
            }
        ],
        "failure": {"message": "token=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5\nMDEyMzQ1Njc4OTAx more"},
        "redactions": 0,
    }
    out = redact_report(report)
    texts = [e["text"] for e in out["findings"][0]["evidence"]]
    assert texts == [
        f"HF_TOKEN={MASK}",
        MASK,
        MASK,
        "Zm9vYmFyYmF6MTIz",
        "Traceback (most recent call last):",
    ]
    assert out["failure"]["message"] == f"token={MASK}\n{MASK} more"
    assert out["redactions"] == 5


def test_the_count_covers_only_what_the_format_prints() -> None:
    from oomdoctor.report.redact import redact_report

    report = {
        "verdict": {"summary": "fetching https://u:pw1@h/x", "what": "x-api-key: abc123"},
        "failure": {"message": "DB_PASSWORD=hunter2"},
        "findings": [{"evidence": [_ref(1, "SECRET=abc")]}],
        "server_args": {"model_path": "s3://b/m?X-Amz-Signature=abc"},
        "input": {"sources": ["/logs/run?token=t1"]},
        "redactions": 0,
    }
    counts = {fmt: redact_report(report, fmt)["redactions"] for fmt in ("text", "markdown")}
    assert counts == {"text": 2, "markdown": 3}  # summary and evidence; Markdown: sources too
    clean = redact_report(report)
    assert clean["redactions"] == 6 == json.dumps(clean).count(MASK)
    assert "hunter2" not in json.dumps(redact_report(report, "text"))  # masked, not counted
