"""The shapes a secret comes in, as data: :mod:`oomdoctor.report.secrets` judges and masks them.

Structure first: a key, flag, header or query parameter whose name names a secret
(``KEY_SHAPES``), in any notation (``'k'``, ``b'k'``, ``\\"k\\"``, ``k%5Fname``, ``k＝v``); a
``name``/``value`` pair (Kubernetes and ECS env entries); URL userinfo with or without a colon;
a webhook URL's token path; the password flags of the common clients (``curl -u``, ``mysql -p``,
``redis-cli -a``, ``sshpass -p``). Token prefixes come from ``token_prefixes.json``, which
``tools/gen_secret_shapes.py`` builds from detect-secrets' plugins plus an overrides file. PEM
blocks and YAML ``- name:``/``value:`` pairs span lines: :mod:`.secrets` carries them over.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

from oomdoctor.extract.lazy import LazyPattern

_WORDS = r"(?:[a-z0-9]+_)*"
#: (normalised key pattern, policy or None): the first row that matches the whole key wins.
#: Keys are normalised to lower-case words joined by ``_`` (``X-Amz-Signature`` →
#: ``x_amz_signature``, ``apiKey`` → ``api_key``, ``api%5Fkey`` → ``api_key``).
KEY_ROWS: tuple[tuple[str, str | None], ...] = (
    # a path, a name, a size, a count or a mode of a secret is not the secret
    (
        _WORDS + r"(?:file|path|dir|url|uri|name|type|mode|len|length|size|dim|dims|num|count"
        r"|id|ids|ratio|usage|map|pool|dtype|format|kind|algorithm|version|index|header|date"
        r"|expires|expiry|ttl|enabled|required|provider|method|backend|host|port|user"
        r"|username|handler|states|cache|author|authors)",
        None,
    ),
    (r"[a-z0-9_]*(?:password|passwd|passphrase|pwd)[a-z0-9_]*", "strong"),
    (r"[a-z0-9_]*(?:secret|credential|signature)[a-z0-9_]*", "strong"),
    (_WORDS + r"(?:sig|cookie|set_cookie|pass|pw|sas)", "strong"),
    (_WORDS + r"auth(?!ors?(?:_|$))[a-z0-9_]*", "strong"),
    (_WORDS + r"api_?key", "strong"),
    (
        r"watermark_key(?:_b)?|watermark_config|[a-z0-9_]*_extra_config|modelexpress_config"
        r"|kv_events_config|unified_cache_external_linker_config",
        "strong",
    ),
    (r"key", "bare"),
    (r"token", "bare"),
    (_WORDS + r"(?:[a-z0-9]+_key|(?:access|private|master|license|signing|session)key)", "key"),
    (_WORDS + r"(?:[a-z0-9]+_token|(?:access|refresh|session|bearer|id|api|hf)token)", "token"),
)
KEY_SHAPES = tuple((LazyPattern(pattern), policy) for pattern, policy in KEY_ROWS)
#: Names a secret only as an environment variable (``WALLET_SEED``, ``PBKDF2_SALT``): a
#: lower-case ``random_seed=42`` is diagnostic data in every SGLang server_args line.
ENV_ONLY = LazyPattern(r"(?:[a-z0-9]+_)+(?:salt|seed)")
SECRETISH = LazyPattern(
    r"(?i)key|token|secret|pass|pwd|pw|sas|salt|seed|credential|sig|auth|cookie|config"
)

#: A quote as it opens a value: ``'``, ``"``, ``b'`` (bytes) or ``\\"`` (JSON inside a string).
#: The longest value a shape reads (a longer secret is read this far, then masked to the end of
#: its run): every attempt costs at most this, so a hostile line costs linear time.
VALUE_CAP = 512
QUOTED = (
    r"""b?'(?:[^'\\\n]|\\.){0,512}(?:'|$)?|b?"(?:[^"\\\n]|\\[^"\n]){0,512}(?:"|$)?"""
    r"""|\\"(?:[^"\\\n]|\\[^"\n]){0,512}(?:\\"|$)?|\\'(?:[^'\\\n]|\\[^'\n]){0,512}(?:\\'|$)?"""
)
VALUE = (
    rf"""(?P<value>{QUOTED}"""
    r"""|\{(?:[^{}\n]|\{[^{}\n]{0,512}\}){0,2048}\}|\[(?:[^\[\]\n]|\[[^\[\]\n]{0,512}\]){0,2048}\]"""
    r"""|[^\s,;&'"(){}\[\]<>…\\]{1,512})"""
)
TOKEN_CHARS = r"[A-Za-z0-9+/=_\-.~%]"
#: How a key opens: ``b'`` / ``'`` / ``"`` / ``\\"`` or nothing.
_OPEN = r"""(?:b(?=['"]))?(?P<q>\\?['"]|)"""
_SEP = r"""(?P<sep>[ \t]*[:：](?![:/])[ \t]*|[=＝](?!=)|%3[Dd]|[ \t]+=[ \t]*(?=['"{b\\]))"""
_CLIENT_VALUE = r"""(?P<value>'[^'\n]{1,256}'|"[^"\n]{1,256}"|[^\s'"]{1,256})"""


class Shape(NamedTuple):
    """One shape a secret comes in: its regex has a ``value`` group (what is masked)."""

    name: str
    example: str
    pattern: re.Pattern[str] | LazyPattern[str]
    judge: str  # "keyed": the ``key`` group's policy decides; "userinfo"; "always"; a policy; …


class _Prefixes(LazyPattern[str]):
    """The token-prefix table (``token_prefixes.json``), read and compiled on first use."""

    def __init__(self) -> None:
        super().__init__("")

    def compiled(self) -> re.Pattern[str]:
        if "_compiled" not in self.__dict__:
            self.pattern = prefix_source()
        return super().compiled()


def prefix_source() -> str:
    """One alternation of every pattern in the token-prefix table, in a ``value`` group."""
    table = json.loads((Path(__file__).parent / "token_prefixes.json").read_text("utf-8"))
    return "(?P<value>" + "|".join(f"(?:{s['pattern']})" for s in table["shapes"]) + ")"


SHAPES = (
    Shape(
        "key = value, 'key': 'value', \"key\": \"value\", header, query parameter",
        "WANDB_API_KEY=…  'api_key': '…'  b'x-api-key': b'…'  \\\"api_key\\\": …  api%5Fkey=…",
        re.compile(
            rf"""(?<![\w.\-/%]){_OPEN}(?P<key>[A-Za-z_#$][\w.\-%]{{0,63}})(?P=q){_SEP}""" + VALUE
        ),
        "keyed",
    ),
    Shape(
        "a name/value pair: Kubernetes and ECS env entries, AWS tags",
        "{'name': 'HF_TOKEN', 'value': '…'}  {\"Name\": \"DB_PASS\", \"Value\": \"…\"}",
        re.compile(
            r"""(?P<q>\\?['"]|)(?:name|Name|NAME|key|Key|KEY)(?P=q)[ \t]*[:=][ \t]*"""
            r"""(?:b(?=['"]))?(?P<q2>\\?['"]|)(?P<key>[A-Za-z_][\w.\-]{0,63})(?P=q2)"""
            r"""[ \t]*[,;]?[ \t]*(?P<q3>\\?['"]|)(?:value|Value|VALUE)(?P=q3)[ \t]*[:=][ \t]*"""
            + VALUE
        ),
        "keyed",
    ),
    Shape(
        "--flag value, --flag=value",
        "--hf-token …  --api-key=…  --pass …",
        re.compile(
            r"""(?<![\w\-])(?P<key>--[A-Za-z][\w\-]{0,63})(?P<sep>=|[ \t]+)"""
            r"""(?P<value>'[^'\n]{0,512}(?:'|$)?|"[^"\n]{0,512}(?:"|$)?|(?!-)[^\s'"]{1,512})"""
        ),
        "keyed",
    ),
    Shape(
        "Authorization header",
        "Authorization: Basic …",
        re.compile(
            r"""(?i)(?<![\w\-])(?:proxy-)?authori[sz]ation['"]?[ \t]*[:=][ \t]*['"]?"""
            r"""(?:(?:basic|bearer|token|digest|negotiate|apikey)[ \t]+)?(?P<value>[^\s'",;]{1,512})"""
        ),
        "always",
    ),
    Shape(
        "Bearer token",
        "Bearer …",
        re.compile(r"(?i)\bbearer[ \t]+(?P<value>[A-Za-z0-9._~+/=\-]{8,512})"),
        "always",
    ),
    Shape(
        "userinfo in any URL (the last @ before the host)",
        "redis://:…@h  postgres://u:…@db:5432/x",
        re.compile(
            r"""\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:@/'"]{0,256}:(?P<value>[^\s'"]{1,256})"""
            r"""@[^\s@/'"?#]{0,256}"""
        ),
        "userinfo",
    ),
    Shape(
        "a token as a URL's whole userinfo (no colon): a PAT, a Sentry DSN's key",
        "https://…@github.com/org/repo  https://…@o1.ingest.sentry.io/1",
        re.compile(
            r"""\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://(?P<value>[^\s:@/'"]{1,256})@(?=[\w\[])"""
        ),
        "token",
    ),
    Shape(
        "a webhook URL's token path (Slack, Discord, Teams)",
        "https://hooks.slack.com/services/…  https://discord.com/api/webhooks/…",
        re.compile(
            r"""(?i)(?:\bhooks\.slack\.com/(?:services|workflows|triggers)/"""
            r"""|\bdiscord(?:app)?\.com/api/webhooks/|\.webhook\.office\.com/webhookb2/)"""
            r"""(?P<value>[A-Za-z0-9_@/\-]{8,512})"""
        ),
        "always",
    ),
    Shape(
        "a client's password flag: curl -u user:pw, mysql -ppw, redis-cli -a pw, sshpass -p pw",
        "curl -u deploy:…  mysql -uroot -p…  redis-cli -a …  sshpass -p …",
        re.compile(
            r"""(?:\bcurl\b[^\n|;&]{0,256}?[ \t](?:-u|--user)[ \t=]*['"]?[^\s:'"@]{1,64}:"""
            r"""(?P<value>[^\s'"@]{1,256})"""
            r"""|\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlsh|mariadb)\b[^\n|;&]{0,256}?"""
            r"""[ \t]-p"""
            + _CLIENT_VALUE.replace("value", "v2")
            + r"""|\bredis-cli\b[^\n|;&]{0,256}?[ \t](?:-a|--pass)[ \t]+"""
            + _CLIENT_VALUE.replace("value", "v3")
            + r"""|\bsshpass\b[^\n|;&]{0,64}?[ \t]-p[ \t]*"""
            + _CLIENT_VALUE.replace("value", "v4")
            + ")"
        ),
        "client",
    ),
    Shape(
        "known token prefixes (token_prefixes.json: detect-secrets' plugins plus overrides)",
        "sk-… hf_… ghp_… glrt-… xoxb-… AKIA… ya29.… nvapi-… sk_live_… SG.… eyJ…",
        _Prefixes(),
        "prefix",
    ),
    Shape(
        "a high-entropy string of token length next to a secret word",
        "HF token: …  password is …",
        re.compile(
            r"""(?i)(?<![a-z])(?:api[ _-]?key|key|token|secret|password|passwd|pwd|passphrase"""
            r"""|credentials?|signature|auth[a-z]*)(?![a-z])(?:[ \t]+is)?[\s:=>'"(,]{1,4}"""
            rf"(?P<value>{TOKEN_CHARS}{{20,512}})"
        ),
        "near",
    ),
)

#: A PEM private-key block opens (``-----BEGIN RSA PRIVATE KEY-----``) and closes.
PEM_BEGIN = LazyPattern(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
PEM_END = "-----END"
#: A YAML or pretty-printed JSON line that names an env entry (``- name: HF_TOKEN``): its
#: ``value:`` follows on the next line.
NAME_LINE = LazyPattern(
    r"""[ \t]*(?:-[ \t]+)?(?P<q>['"]?)(?:name|Name|key|Key)(?P=q)[ \t]*:[ \t]*"""
    r"""(?P<q2>['"]?)(?P<key>[A-Za-z_][\w.\-]{0,63})(?P=q2)[ \t]*,?[ \t\r]*"""
)
VALUE_LINE = LazyPattern(
    r"""[ \t]*(?:-[ \t]+)?(?P<q>['"]?)(?:value|Value)(?P=q)[ \t]*:[ \t]*""" + VALUE
)
