"""No planted secret reaches any output: every shape of issue 14, planted into copies of real
fixture logs and snapshots, run through the CLI in every format, to stdout and to ``-o`` files.

Each case is first run with ``--no-redact`` to prove the secret does reach the report (else the
test would pass for nothing), then without it: no secret, and no 8-character start of one, may
appear on stdout, on stderr or in the file.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from oomdoctor.cli import cli
from oomdoctor.gpu import nvml
from oomdoctor.report.redact import MASK
from tests import fake_nvml
from tests.conftest import FIXTURES, load_toml
from tests.fake_nvml import FakeGpu

FORMATS = ("text", "markdown", "json")
PRESIGNED_CRED = "AKIAPRESIGNED0000001"
PRESIGNED_SIG = "d3adb33fPLANTEDsig0123456789abcdef"
PRESIGNED_TOKEN = "FwoGZXIvYXdzPLANTEDsessionTOKEN%2Fabc%3D%3D"
PRESIGNED = (
    "https://bucket.s3.amazonaws.com/models/Qwen2.5-7B-Instruct?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    f"&X-Amz-Credential={PRESIGNED_CRED}%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    f"&X-Amz-Signature={PRESIGNED_SIG}&X-Amz-Security-Token={PRESIGNED_TOKEN}"
)

#: Groups of planted secrets, each appended to the OOM line of a real SGLang log: (the text
#: planted, the secrets in it). Each group stays inside the 400 characters evidence keeps.
GROUPS = {
    "env": (
        "WANDB_API_KEY=9f8e7d6c5b4a39281706f5e4d3c2b1a0aa11bb22 "
        "ANTHROPIC_API_KEY=anthrPLANTEDnotSkAnt123 DB_PASSWORD=dbpwPLANTED!word42 "
        "MY_SECRET=mysecPLANTED42x",
        (
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0aa11bb22",
            "anthrPLANTEDnotSkAnt123",
            "dbpwPLANTED!word42",
            "mysecPLANTED42x",
        ),
    ),
    "aws": (
        "AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjPLANTED//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+abc== "
        "SGLANG_API_KEY=sglngPLANTEDkey88 API_KEY=apikyPLANTED5abc",
        (
            "IQoJb3JpZ2luX2VjPLANTED//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+abc==",
            "sglngPLANTEDkey88",
            "apikyPLANTED5abc",
        ),
    ),
    "urls": (
        "while fetching postgres://svc:pgpwPL@NTED/w@rd@db:5432/x redis://:redisPLANTEDpw5@cache:6379/0 "
        "https://mirror.example/m.bin?token=qtokPLANTED9xyz&sig=qsigPLANTEDZm9v",
        ("pgpwPL@NTED/w@rd", "redisPLANTEDpw5", "qtokPLANTED9xyz", "qsigPLANTEDZm9v"),
    ),
    "headers": (
        "curl -H 'Authorization: Bearer bearPLANTEDtokenValue0123456' -H 'x-api-key: "
        "xapiPLANTEDkey123' https://maps.example/?key=AIzaSyPLANTED0123456789abcdefghijklmnop",
        (
            "bearPLANTEDtokenValue0123456",
            "xapiPLANTEDkey123",
            "AIzaSyPLANTED0123456789abcdefghijklmnop",
        ),
    ),
    "prefixes": (
        "sk-ant-api03-PLANTEDabcdefghijklmnop hf_PLANTEDabcdefghijklmnopqrstuvwx "
        "ghp_PLANTEDabcdefghijklmnopqrstuvwx1234 glpat-PLANTEDabcdefghij123 "
        "xoxb-123456789012-PLANTEDabcdef AKIAPLANTED000000001 "
        "npm_PLANTEDabcdefghijklmnopqrstuvwx012 "
        "eyJhbGciOiJIUzI1NiJ9.eyJQTEFOVEVEIjoxfQ.PLANTEDsig_abcdefgh123",
        (
            "sk-ant-api03-PLANTEDabcdefghijklmnop",
            "hf_PLANTEDabcdefghijklmnopqrstuvwx",
            "ghp_PLANTEDabcdefghijklmnopqrstuvwx1234",
            "glpat-PLANTEDabcdefghij123",
            "xoxb-123456789012-PLANTEDabcdef",
            "AKIAPLANTED000000001",
            "npm_PLANTEDabcdefghijklmnopqrstuvwx012",
            "eyJhbGciOiJIUzI1NiJ9.eyJQTEFOVEVEIjoxfQ.PLANTEDsig_abcdefgh123",
        ),
    ),
    "flags": (
        "cmd: python3 -m sglang.launch_server --token ftokPLANTED123abc --password "
        "fpwPLANTEDhunter2 --hf-token hf_FLAGPLANTEDabcdefghijklmnopqrstu --api-key "
        "fapiPLANTEDkey0987 pypi-AgEIcHlwaS5vcmcPLANTEDabcdefghijklmnopqrstuvwxyz0123456789",
        (
            "ftokPLANTED123abc",
            "fpwPLANTEDhunter2",
            "hf_FLAGPLANTEDabcdefghijklmnopqrstu",
            "fapiPLANTEDkey0987",
            "pypi-AgEIcHlwaS5vcmcPLANTEDabcdefghijklmnopqrstuvwxyz0123456789",
        ),
    ),
    # longer than the evidence keeps: the 400-character cut falls inside the query
    "presigned": (f"while loading {PRESIGNED}", (PRESIGNED_CRED, PRESIGNED_SIG, PRESIGNED_TOKEN)),
}

OOM_FIXTURE = FIXTURES / "sglang-0.5.2" / "worked-example-y070.log"
OOM_LINE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def _category(log: Path) -> str:
    return str(load_toml(log.with_suffix(".expect.toml"))["category"])


def _planted(tmp_path: Path, fixture: Path, old: str, new: str) -> Path:
    text = fixture.read_text("utf-8")
    assert old in text, f"{fixture.name} no longer has {old!r}"
    out = tmp_path / fixture.name
    out.write_text(text.replace(old, new, 1), "utf-8")
    return out


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def _assert_clean(where: str, text: str, secrets: tuple[str, ...]) -> None:
    for secret in secrets:
        assert secret[:8] not in text, f"{secret[:8]}… of {secret!r} leaked in {where}"


def _check_everywhere(
    tmp_path: Path, log: Path, secrets: tuple[str, ...], extra: tuple[str, ...] = ()
) -> dict[str, int]:
    """Run diagnose in every format, to stdout and with -o; return each format's count."""
    raw = _run(["diagnose", str(log), "--format", "json", "--no-redact", *extra])
    for secret in secrets:  # the planted secret reaches the report: the test is not vacuous
        assert secret in raw.stdout, f"{secret!r} is not in the unredacted report"
    assert json.loads(raw.stdout)["redactions"] == 0
    counts = {}
    for fmt in FORMATS:
        shown = _run(["diagnose", str(log), "--format", fmt, *extra])
        assert shown.exit_code == raw.exit_code, shown.output
        _assert_clean(f"{fmt} stdout", shown.stdout, secrets)
        _assert_clean(f"{fmt} stderr", shown.stderr, secrets)
        out = tmp_path / f"report.{fmt}"
        written = _run(["diagnose", str(log), "--format", fmt, "-o", str(out), *extra])
        assert written.exit_code == raw.exit_code, written.output
        _assert_clean(f"{fmt} -o file", out.read_text("utf-8"), secrets)
        _assert_clean(f"{fmt} -o stdout/stderr", written.output + written.stderr, secrets)
        counts[fmt] = _count(shown.stdout, fmt)
        if fmt == "json":
            report = json.loads(shown.stdout)
            assert report["verdict"]["category"] == json.loads(raw.stdout)["verdict"]["category"]
            assert report["redactions"] == shown.stdout.count(MASK)  # JSON shows every mask
    assert counts["text"] <= counts["json"] and counts["markdown"] <= counts["json"]
    return counts


def _count(output: str, fmt: str) -> int:
    if fmt == "json":
        return int(json.loads(output)["redactions"])
    m = re.search(r"(\d+) secret\(s\) redacted", output)
    assert m, output[-300:]
    return int(m.group(1))


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_secrets_after_an_oom_line(tmp_path: Path, group: str) -> None:
    planted, secrets = GROUPS[group]
    log = _planted(tmp_path, OOM_FIXTURE, OOM_LINE, f"{OOM_LINE} {planted}")
    counts = _check_everywhere(tmp_path, log, secrets, ("--no-gpu",))
    assert counts["json"] >= len(secrets) or group == "presigned"  # cut: only what is kept
    text = _run(["diagnose", str(log), "--no-gpu"]).stdout
    assert _category(OOM_FIXTURE) in text  # the verdict is the fixture's own


def test_a_secret_crossing_the_evidence_cut_leaves_no_start(tmp_path: Path) -> None:
    """The cut at 400 characters falls inside the presigned query: the cut moves to the end of
    the secret, and redaction masks the whole value, never leaving its first characters."""
    secrets = GROUPS["presigned"][1]
    line = f"{OOM_LINE} {PRESIGNED} (retry 1 of 3, backing off 2 s)"
    assert line.index(PRESIGNED_TOKEN) < 400 < line.index(PRESIGNED_TOKEN) + len(PRESIGNED_TOKEN)
    log = _planted(tmp_path, OOM_FIXTURE, OOM_LINE, line)
    args = ["diagnose", str(log), "--format", "json", "--no-gpu"]
    raw = json.loads(_run([*args, "--no-redact"]).stdout)["failure"]["where"]["text"]
    clean = json.loads(_run(args).stdout)
    where = clean["failure"]["where"]["text"]
    assert raw.endswith(PRESIGNED_TOKEN + "…")  # the cut kept the secret whole
    assert where.endswith(f"X-Amz-Security-Token={MASK}…")
    _assert_clean("evidence", where, secrets)
    assert clean["redactions"] == json.dumps(clean).count(MASK)


def test_a_bare_token_crossing_the_cut_leaves_no_start(tmp_path: Path) -> None:
    """A prefixed token with no key beside it, 8 characters before the cut: cut first, its
    start would be too short to be known as a token."""
    token = "hf_CUTPLANTEDabcdefghijklmnopqrstuvwx"
    line = f"{OOM_LINE} {'retrying; ' * 31}at {token} and more text"
    assert line.index(token) == 392
    log = _planted(tmp_path, OOM_FIXTURE, OOM_LINE, line)
    _check_everywhere(tmp_path, log, (token,), ("--no-gpu",))


def test_server_args_line_as_evidence(tmp_path: Path) -> None:
    """verl's ServerArgs(...) repr is evidence of the RL co-location rule: the presigned
    model_path and api_key are masked in the evidence and in the JSON server_args."""
    fixture = FIXTURES / "ray-verl" / "cotenant-rl-colocated.log"
    log = _planted(
        tmp_path,
        fixture,
        "server_args=ServerArgs(model_path='/data/models/Qwen2.5-7B-Instruct',",
        f"server_args=ServerArgs(api_key='saPLANTEDapiKey77', model_path='{PRESIGNED}',",
    )
    secrets = (PRESIGNED_CRED, PRESIGNED_SIG, PRESIGNED_TOKEN, "saPLANTEDapiKey77")
    counts = _check_everywhere(tmp_path, log, secrets, ("--no-gpu",))
    clean = json.loads(_run(["diagnose", str(log), "--format", "json", "--no-gpu"]).stdout)
    assert clean["verdict"]["category"] == _category(fixture)
    assert clean["server_args"]["model_path"].startswith("https://bucket.s3.amazonaws.com/models/")
    assert clean["server_args"]["mem_fraction_static"] == 0.6  # numbers are not secrets
    assert counts["text"] >= 1


def test_dict_server_args_as_evidence(tmp_path: Path) -> None:
    fixture = FIXTURES / "sglang-0.5.23" / "healthy-startup.log"
    model = "'model_path': '/models/Meta-Llama-3.1-8B-Instruct', "
    log = _planted(
        tmp_path,
        fixture,
        model,
        f"{model}'api_key': 'dictPLANTEDkey42', 'ssl_keyfile_password': 'sslPLANTEDpass9', ",
    )
    _check_everywhere(tmp_path, log, ("dictPLANTEDkey42", "sslPLANTEDpass9"), ("--no-gpu",))


def test_a_secret_only_in_server_args_counts_for_json_only(tmp_path: Path) -> None:
    """The server_args line is no evidence here: the presigned model_path is in the JSON
    report's server_args, which text and Markdown do not print, so only JSON counts it."""
    fixture = FIXTURES / "sglang-0.5.23" / "kv-pool-alloc-oom-oversized.log"
    log = _planted(
        tmp_path,
        fixture,
        "'model_path': 'Qwen/Qwen2.5-7B-Instruct-1M'",
        f"'model_path': '{PRESIGNED}'",
    )
    counts = _check_everywhere(tmp_path, log, (PRESIGNED_CRED, PRESIGNED_SIG), ("--no-gpu",))
    assert counts["json"] >= 3
    assert counts["text"] == 0 and counts["markdown"] == 0


@pytest.mark.parametrize("group", ["env", "prefixes", "presigned"])
def test_the_count_is_what_the_format_shows(tmp_path: Path, group: str) -> None:
    """Markdown prints its evidence whole: its count is the masks it prints. JSON prints every
    field (failure.message and failure.where too), so it counts more than Markdown."""
    log = _planted(tmp_path, OOM_FIXTURE, OOM_LINE, f"{OOM_LINE} {GROUPS[group][0]}")
    md = _run(["diagnose", str(log), "--format", "markdown", "--no-gpu"]).stdout
    js = _run(["diagnose", str(log), "--format", "json", "--no-gpu"]).stdout
    assert _count(md, "markdown") == md.count("redacted") - 1 > 0  # less the footer's word
    assert _count(js, "json") == js.count(MASK) > _count(md, "markdown")


def test_no_redact_shows_everything(tmp_path: Path) -> None:
    planted, secrets = GROUPS["env"]
    log = _planted(tmp_path, OOM_FIXTURE, OOM_LINE, f"{OOM_LINE} {planted}")
    for fmt in FORMATS:
        out = _run(["diagnose", str(log), "--format", fmt, "--no-gpu", "--no-redact"]).stdout
        assert MASK not in out and _count(out, fmt) == 0
        if fmt != "text":  # the terminal report cuts evidence to one row
            assert all(secret in out for secret in secrets)


# -- snapshots: command lines and process names ---------------------------------------------

SNAP_SECRETS = (
    "hf_SNAPPLANTEDabcdefghijklmnopqr",
    "snapPLANTEDapiKey1",
    "snapPLANTEDpw22",
    "snapPLANTEDtok333",
)
SNAP_CMDLINE = (
    "python3 -m sglang.launch_server --model-path /models/Qwen2.5-7B --hf-token "
    f"{SNAP_SECRETS[0]} --api-key {SNAP_SECRETS[1]} --password {SNAP_SECRETS[2]} "
    f"--token {SNAP_SECRETS[3]} --mem-fraction-static 0.9"
)


def _fake_host(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    proc = root / "proc" / "4187"
    proc.mkdir(parents=True)
    (proc / "cmdline").write_bytes(SNAP_CMDLINE.replace(" ", "\0").encode() + b"\0")
    (proc / "comm").write_text("python3\n")
    gpu = FakeGpu(
        "GPU-aaaa", "00000000:3B:00.0", "NVIDIA H100 80GB HBM3", 81559 << 20, 70 << 30,
        processes=[(4187, 60 << 30)],
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make([gpu]))
    monkeypatch.setattr(nvml, "take", functools.partial(nvml.take, proc_root=root / "proc"))


def test_snapshot_file_masks_command_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_host(monkeypatch, tmp_path)
    raw = tmp_path / "raw.json"
    assert _run(["snapshot", "--no-redact", "-o", str(raw)]).exit_code == 0
    assert all(s in raw.read_text() for s in SNAP_SECRETS)  # the fake /proc was read
    for args in (["snapshot", "-o", str(tmp_path / "snap.json")], ["snapshot"]):
        result = _run(args)
        assert result.exit_code == 0, result.output
        text = result.stdout if len(args) == 1 else (tmp_path / "snap.json").read_text()
        _assert_clean("snapshot", text + result.stderr, SNAP_SECRETS)
        cmdline = json.loads(text)["processes"][0]["cmdline"]
        assert "--mem-fraction-static 0.9" in cmdline and "--hf-token <redacted>" in cmdline


def test_a_snapshot_read_into_a_report_is_masked(tmp_path: Path) -> None:
    """An unredacted snapshot (``snapshot --no-redact``, or nvidia-smi's own output) whose
    process names and command lines hold secrets: no format of the report shows them."""
    fixture = FIXTURES / "sglang-0.5.2" / "runtime-oom-container-snapshot.log"
    snap = json.loads((FIXTURES / "snapshots" / "container-self.json").read_text())
    other = dict(snap["processes"][0], pid=4242, used_bytes=1 << 30, visible=True)
    other["name"] = f"python3 --hf-token {SNAP_SECRETS[0]}"
    other["cmdline"] = SNAP_CMDLINE
    snap["processes"].append(other)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(snap))
    csv = tmp_path / "apps.csv"
    csv.write_text(
        "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n"
        f"4242, python3 --api-key {SNAP_SECRETS[1]}, {other['gpu_uuid']}, 1024 MiB\n"
    )
    for snapshot, secrets in ((path, SNAP_SECRETS[:1]), (csv, SNAP_SECRETS[1:2])):
        text = _run(["diagnose", str(fixture), "--snapshot", str(snapshot), "--no-redact"]).stdout
        assert secrets[0] in text  # the name reaches the GPU section
        _check_everywhere(tmp_path, fixture, (), ("--snapshot", str(snapshot)))
        for fmt in FORMATS:
            out = _run(["diagnose", str(fixture), "--snapshot", str(snapshot), "--format", fmt])
            _assert_clean(f"{fmt} with {snapshot.name}", out.stdout + out.stderr, SNAP_SECRETS)


# -- what is not a secret stays ---------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "max_total_tokens=100000, max_prefill_tokens=16384, chunked_prefill_size=8192",
        "'kv_cache_dtype': 'fp8_e4m3', 'page_size': 16, 'context_length': 32768",
        "[2025-09-22 08:14:30] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, "
        "token usage: 0.95, #running-req: 0, #queue-req: 0",
        "Decode batch. #running-req: 14, #token: 1234, token usage: 0.07, gen throughput (token/s): 9",
        "tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto', "
        "skip_tokenizer_init=False, 'key_dim': 128, num_tokens=4096, new_token: 3",
        "    key = self.rotary_emb(positions, query, key)",
        "    token_to_kv_pool = self._build_token_to_kv_pool(",
        "'api_key': None, 'admin_api_key': None, ssl_keyfile='/etc/ssl/server.key'",
    ],
)
def test_diagnostic_data_is_not_masked(tmp_path: Path, line: str) -> None:
    log = _planted(tmp_path, OOM_FIXTURE, OOM_LINE, f"{OOM_LINE} {line}")
    out = json.loads(_run(["diagnose", str(log), "--format", "json", "--no-gpu"]).stdout)
    assert out["redactions"] == 0
    assert line in out["failure"]["where"]["text"]
    assert out["verdict"]["category"] == _category(OOM_FIXTURE)
