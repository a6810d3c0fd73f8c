"""Secrets found by their structure (issue 22, item 1): name/value pairs, PEM blocks, URL
userinfo without a colon, webhook paths, keys in bytes / escaped / percent-encoded / full-width
notation, ``*_PASS``-style variables, client password flags, and the token prefixes of the
generated table (tools/gen_secret_shapes.py).

Each shape is planted after the OOM line of a real SGLang log and run through the real CLI in
every format (text, JSON, Markdown, the SVG), through ``watch`` (its stderr summary and its
``-o`` report) and, for the shapes that span lines, through ``snapshot`` and ``diagnose
--snapshot``. ``--no-redact`` first proves the secret reaches the report; then no secret, and
no half of one, may appear anywhere, while the name beside it stays readable.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from oomdoctor.cli import cli
from oomdoctor.report.secrets import MASK, mask
from tests.conftest import FIXTURES, REPO
from tests.test_secrets_everywhere import OOM_FIXTURE, OOM_LINE, _fake_host, _planted

FORMATS = ("text", "markdown", "json")

#: id: (the text planted after the OOM line, its secrets, what must stay readable). Each fits in
#: the 400 characters that evidence keeps.
CASES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "k8s-env-dict": (
        "container env=[{'name': 'HF_TOKEN', 'value': 'k8sQm2Lp4Rt9x7Vb'}, "
        "{'name': 'MODEL_ID', 'value': 'Qwen/Qwen2.5-7B-Instruct'}]",
        ("k8sQm2Lp4Rt9x7Vb",),
        ("HF_TOKEN", "Qwen/Qwen2.5-7B-Instruct"),
    ),
    "ecs-env-json": (
        'taskdef "environment": [{"name": "DB_PASSWORD", "value": "ecsPw!42hunter"}, '
        '{"Name": "SLACK_BOT_TOKEN", "Value": "slk9Wq3Er7Ty1Ui5"}]',
        ("ecsPw!42hunter", "slk9Wq3Er7Ty1Ui5"),
        ("DB_PASSWORD", "SLACK_BOT_TOKEN"),
    ),
    "pem-one-line": (
        'deploy key "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE'
        'pemBody7Kq2\\n-----END OPENSSH PRIVATE KEY-----\\n"',
        ("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEpemBody7Kq2",),
        ("BEGIN OPENSSH PRIVATE KEY", "END OPENSSH PRIVATE KEY"),
    ),
    "userinfo-no-colon": (
        "while fetching https://pat7Kq2Xw9Lm4Zr8Tn@git.example.com/org/weights.git and "
        "sentry https://3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e@o450123.ingest.sentry.io/5512345",
        ("pat7Kq2Xw9Lm4Zr8Tn", "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e"),
        ("git.example.com/org/weights.git", "ingest.sentry.io/5512345"),
    ),
    "webhooks": (
        "alert to https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/slackHook9Xy8Zq7Wv6Ut "
        "and https://discord.com/api/webhooks/112233445566778899/dscTok-Ab12_Cd34Ef56Gh78",
        ("slackHook9Xy8Zq7Wv6Ut", "dscTok-Ab12_Cd34Ef56Gh78"),
        ("hooks.slack.com/services/", "discord.com/api/webhooks/"),
    ),
    "notations": (
        'headers={b\'x-api-key\': b\'bytesKey42xQw\'} body="{\\"api_key\\": \\"escKey42xyzQ\\"}" '
        "GET /v1/models?api%5Fkey=pctKey42xyzQ API_KEY＝fwKey42xyzQw",
        ("bytesKey42xQw", "escKey42xyzQ", "pctKey42xyzQ", "fwKey42xyzQw"),
        ("x-api-key", "api_key", "api%5Fkey", "API_KEY"),
    ),
    "variable-names": (
        "env: REDIS_PASS=rdsPass42x SMTP_PW=smtpPw42xy AZURE_STORAGE_SAS=sasTok42xy "
        "CSRF_SALT=saltVal42xy WALLET_SEED=seedVal42xy random_seed=1234",
        ("rdsPass42x", "smtpPw42xy", "sasTok42xy", "saltVal42xy", "seedVal42xy"),
        (
            "REDIS_PASS",
            "SMTP_PW",
            "AZURE_STORAGE_SAS",
            "CSRF_SALT",
            "WALLET_SEED",
            "random_seed=1234",
        ),
    ),
    "client-flags": (
        "cmd: curl -u deploy:curlPw42xQ https://m.example/x; mysql -h db -uroot -pmysqlPw42xQ "
        "models; redis-cli -h cache -a redisPw42xQ ping; sshpass -p sshPw42xQz scp a b:",
        ("curlPw42xQ", "mysqlPw42xQ", "redisPw42xQ", "sshPw42xQz"),
        ("curl -u deploy:", "-uroot -p", "redis-cli -h cache -a", "sshpass -p"),
    ),
    "password-flags": (
        "cmd: mysqldump --password=dumpPw42xQ db; rclone sync --pass rclPw42xQz s3:m; "
        "PGPASSWORD=pgPw42xQzy psql -h db; docker run -u 1000:1000 img",
        ("dumpPw42xQ", "rclPw42xQz", "pgPw42xQzy"),
        ("--password=", "--pass", "PGPASSWORD=", "-u 1000:1000"),
    ),
    "prefixes-gpu-host": (
        "tokens ya29.a0AfH6SMBxYzGoogle42abcdefGH nvapi-AbCdEfGhIjKlMnOpNvidia4242XyZ "
        "sk_live_51HxYzStripe42AbCdEfGhIj gsk_GroqKey42AbCdEfGhIjKlMn hvs.CAESIVault42AbCdEfGhIjKl",
        (
            "ya29.a0AfH6SMBxYzGoogle42abcdefGH",
            "nvapi-AbCdEfGhIjKlMnOpNvidia4242XyZ",
            "sk_live_51HxYzStripe42AbCdEfGhIj",
            "gsk_GroqKey42AbCdEfGhIjKlMn",
            "hvs.CAESIVault42AbCdEfGhIjKl",
        ),
        ("tokens",),
    ),
    "prefixes-more": (
        "keys r8_ReplicateKey42AbCdEfGhIj lsv2_pt_LangSmith42AbCdEfGhIjKl_0a glrt-Runner42AbCdEfGhIjKl "
        "SG.SendGrid42AbCdEfGhIj.Part2Of42KeyAbCdEfGhIjKlMn "
        "AGE-SECRET-KEY-1QWERTYUIOPASDFGHJKLZXCVBNM2345678QWERTYUIOPAS",
        (
            "r8_ReplicateKey42AbCdEfGhIj",
            "lsv2_pt_LangSmith42AbCdEfGhIjKl_0a",
            "glrt-Runner42AbCdEfGhIjKl",
            "SG.SendGrid42AbCdEfGhIj.Part2Of42KeyAbCdEfGhIjKlMn",
            "AGE-SECRET-KEY-1QWERTYUIOPASDFGHJKLZXCVBNM2345678QWERTYUIOPAS",
        ),
        ("keys",),
    ),
    "prefixes-detect-secrets": (
        "creds AKIAQ3EGUPSTREAM42XZ rk_live_AbCdEfGhIjKlMnOpQrStUvWx "
        "sq0csp-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfG glpat-Upstream42AbCdEfGhIjK",
        (
            "AKIAQ3EGUPSTREAM42XZ",
            "rk_live_AbCdEfGhIjKlMnOpQrStUvWx",
            "sq0csp-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfG",
            "glpat-Upstream42AbCdEfGhIjK",
        ),
        ("creds",),
    ),
}


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def _assert_clean(where: str, text: str, secrets: tuple[str, ...]) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} leaked in {where}"
        half = secret[len(secret) // 2 :]
        assert half not in text, f"the second half of {secret!r} leaked in {where}"


@pytest.fixture(scope="module")
def planted_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("planted")
    out = {}
    for case, (planted, _, _) in CASES.items():
        (root / case).mkdir()
        out[case] = _planted(root / case, OOM_FIXTURE, OOM_LINE, f"{OOM_LINE} {planted}")
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_shape_is_masked_in_every_format(
    tmp_path: Path, planted_logs: dict[str, Path], case: str
) -> None:
    _, secrets, names = CASES[case]
    log = str(planted_logs[case])
    raw = _run(["diagnose", log, "--format", "json", "--no-redact", "--no-gpu"])
    for secret in secrets:  # the planted secret reaches the report: the test is not vacuous
        assert secret in raw.stdout, f"{secret!r} is not in the unredacted report"
    for fmt in FORMATS:
        svg = tmp_path / f"{fmt}.svg"
        shown = _run(["diagnose", log, "--format", fmt, "--no-gpu", "--svg", str(svg)])
        assert shown.exit_code == raw.exit_code, shown.output
        _assert_clean(f"{fmt} stdout and stderr", shown.stdout + shown.stderr, secrets)
        _assert_clean(f"{fmt} --svg", svg.read_text("utf-8") if svg.exists() else "", secrets)
        if fmt == "json":
            where = json.loads(shown.stdout)["failure"]["where"]["text"]
            assert MASK in where
            for name in names:  # the name beside a secret stays readable
                assert name in where, f"{name!r} is not readable in {where!r}"


@pytest.mark.parametrize("case", ["k8s-env-dict", "notations", "client-flags", "prefixes-more"])
def test_watch_summary_and_report_are_masked(
    tmp_path: Path, planted_logs: dict[str, Path], case: str
) -> None:
    _, secrets, _ = CASES[case]
    report = tmp_path / "report.json"
    log = tmp_path / "server.log"
    server = [sys.executable, str(REPO / "tests" / "fake_server.py"), str(planted_logs[case])]
    watched = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "watch", "--no-gpu", "--log", str(log), "-o",
         str(report), "--format", "json", "--", *server, "--mode", "crash"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert "-- oomdoctor --" in watched.stderr, watched.stderr[-2000:]
    summary = watched.stderr.split("-- oomdoctor --", 1)[1]  # before it: the server's own output
    _assert_clean("watch's stderr summary", summary, secrets)
    _assert_clean("watch -o", report.read_text("utf-8"), secrets)
    assert MASK in report.read_text("utf-8")
    assert log.stat().st_mode & 0o777 == 0o600  # the --log copy holds the secrets: owner only


YAML_SECRET = "yamlHfVal9Qw2Er4Ty6Ui8"
PEM_BODY = ("MIIEowIBAAKCAQEApemLine1Qw2Er4Ty6Ui8Op", "pemLine2As3Df5Gh7Jk9Lz1Xc3Vb5==")
SPANNING = (
    "bash -c 'cat > /etc/pod.yaml <<EOF\n  env:\n  - name: HF_TOKEN\n"
    f"    value: {YAML_SECRET}\n  - name: MODEL\n    value: Qwen/Qwen2.5-7B\nEOF\n"
    f'echo "-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY[0]}\n{PEM_BODY[1]}\n'
    "-----END RSA PRIVATE KEY-----\" > key.pem'"
)


def test_snapshot_masks_shapes_over_several_lines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A command line written over several lines (a heredoc): the YAML ``value:`` under a
    secret ``name:`` and a PEM body are masked in the snapshot file."""
    _fake_host(monkeypatch, tmp_path)
    cmdline = tmp_path / "proc" / "4187" / "cmdline"
    cmdline.write_bytes(SPANNING.encode() + b"\0")
    raw = _run(["snapshot", "--no-redact"])
    assert YAML_SECRET in raw.stdout and PEM_BODY[0] in raw.stdout  # the fake /proc was read
    shown = _run(["snapshot"])
    assert shown.exit_code == 0, shown.output
    _assert_clean("snapshot", shown.stdout + shown.stderr, (YAML_SECRET, *PEM_BODY))
    kept = json.loads(shown.stdout)["processes"][0]["cmdline"]
    assert "- name: HF_TOKEN\n    value: <redacted>" in kept
    assert "value: Qwen/Qwen2.5-7B" in kept and "-----END RSA PRIVATE KEY-----" in kept


def test_a_snapshot_name_over_several_lines_is_masked_and_forges_no_line(tmp_path: Path) -> None:
    """A process name holding newlines (prctl allows it): the YAML and PEM secrets in it are
    masked, and no line of the text report starts with what followed a newline."""
    fixture = FIXTURES / "sglang-0.5.2" / "runtime-oom-container-snapshot.log"
    snap = json.loads((FIXTURES / "snapshots" / "container-self.json").read_text())
    other = dict(snap["processes"][0], pid=4242, used_bytes=1 << 30, visible=True)
    other["name"] = f"python3\nverdict: not an OOM\n- name: HF_TOKEN\n  value: {YAML_SECRET}"
    snap["processes"].append(other)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(snap))
    raw = _run(["diagnose", str(fixture), "--snapshot", str(path), "--no-redact"])
    assert YAML_SECRET in raw.stdout
    for fmt in FORMATS:
        out = _run(["diagnose", str(fixture), "--snapshot", str(path), "--format", fmt])
        _assert_clean(f"{fmt} with a multi-line name", out.stdout + out.stderr, (YAML_SECRET,))
        if fmt != "json":
            lines = out.stdout.splitlines()
            assert not any(line.lstrip("| ").startswith("verdict: not an OOM") for line in lines)
            assert not any(line.lstrip().startswith("- name: HF_TOKEN") for line in lines)


# -- the shapes on their own: what is masked and what is kept -------------------------------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("- name: HF_TOKEN\n  value: hfYamlVal9Qw2Er4", "- name: HF_TOKEN\n  value: <redacted>"),
        ('{\n  "name": "DB_PASS",\n  "value": "pw42Qw9Er"\n}', '"value": "<redacted>"'),
        ("- name: MODEL\n  value: Qwen/Qwen2.5-7B", "value: Qwen/Qwen2.5-7B"),
        (
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIabc\n-----END EC PRIVATE KEY-----",
            "<redacted>",
        ),
        ("ssh -p22 git@github.com; gcc -pthread -pipe; python -u train.py", "-pthread"),
        ("'random_seed': 42, seed=1234, 'num_tokens': 4096", "seed=1234"),
        ("https://git@github.com/org/repo.git", "https://git@github.com"),
        ("docker run -u app:app img; python -u mod:func", "-u app:app img; python -u mod:func"),
    ],
)
def test_shapes_on_their_own(text: str, kept: str) -> None:
    assert kept in mask(text)[0]


def test_name_value_pairs_as_data_and_over_evidence_lines() -> None:
    """In a report's data (a parsed env list) and over two consecutive evidence lines."""
    from oomdoctor.report.redact import Redactor

    env = [{"name": "HF_TOKEN", "value": "dataHfVal9Qw2"}, {"Name": "MODEL", "Value": "Qwen"}]
    lines = [
        {"source": "a.log", "line": 7, "text": "  - name: DB_PASSWORD"},
        {"source": "a.log", "line": 8, "text": "    value: lineDbPw9Qw2"},
    ]
    clean = Redactor().walk({"env": env, "evidence": lines})
    assert clean["env"] == [{"name": "HF_TOKEN", "value": MASK}, {"Name": "MODEL", "Value": "Qwen"}]
    assert clean["evidence"][1]["text"] == f"    value: {MASK}"


def test_a_pem_block_over_lines_is_masked_to_its_end() -> None:
    text = "key:\n-----BEGIN PRIVATE KEY-----\nAAAAbody1\nBBBBbody2\n-----END PRIVATE KEY-----\nok"
    out = mask(text)[0]
    assert "body1" not in out and "body2" not in out
    assert out.endswith("-----END PRIVATE KEY-----\nok")


def test_a_hostile_megabyte_line_takes_linear_time() -> None:
    """Every shape reads a bounded value: a 1 MB line of the separators and openers the shapes
    look for finishes in seconds, not in the minutes a backtracking regex would take."""
    size = 1 << 20
    lines = [
        "api_key=" * (size // 8),
        "{'name': 'X_TOKEN', " * (size // 20),
        "b'" * (size // 2),
        "-eyJa" * (size // 5),
        "mysql " * (size // 6),
        "https://x" + "@" * size,
        "-----BEGIN PRIVATE KEY-----" * (size // 27),
    ]
    for line in lines:
        start = time.perf_counter()
        mask(line)
        assert time.perf_counter() - start < 20, line[:40]
