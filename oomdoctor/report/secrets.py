"""Find secrets in text by their shape, not by a list of names.

SGLang prints api_key, admin_api_key and ssl_keyfile_password in clear text in every server_args
line (sglang-logs.md §2.1); logs also carry tokens in URLs, headers, flags and environment dumps.
A secret is found by the shape around it (``SHAPES``): a key, flag, header or query parameter
whose name names a secret (``KEY_SHAPES``), with a value that its policy (``POLICIES``) calls a
secret; a URL's userinfo; a known token prefix; a high-entropy string next to a secret word.
A masked value that runs to the end of a line masks the token characters that start the next
line too (a secret wrapped by hand).

:mod:`oomdoctor.report.redact` applies this to a whole report and counts what each format shows.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.extract.lazy import LazyPattern

MASK = "<redacted>"
#: How far past its limit a cut may move to keep a secret whole (else it stops before it).
CUT_SLACK = 200
#: How much text past its limit a cut reads to find the secrets around it.
CUT_WINDOW = 4096


class Policy(NamedTuple):
    """When a value beside a secret-naming key is a secret."""

    numbers_from: int | None  # a plain number of at least this many digits (None: never)
    words: bool  # a plain word (letters only, at most 12) is masked too
    min_len: int  # shorter values are kept
    tokenish: bool  # only token characters, and at least two classes (lower, upper, digit, sign)
    names: bool  # a name made of short pieces (``Llama-3.1-8B``, a UUID) is kept
    entropy: float  # at least this many bits per character


POLICIES = MappingProxyType(
    {
        # password, secret, credential, signature, cookie, auth*, api key, any query parameter
        "strong": Policy(4, True, 1, False, False, 0.0),
        # another ``*_key``: ``access_key``, ``private_key``
        "key": Policy(None, False, 4, False, False, 0.0),
        # ``*_token``: ``hf_token``, ``AWS_SESSION_TOKEN`` (``new_token: 3`` is a count)
        "token": Policy(None, False, 6, True, False, 0.0),
        # a lone ``key`` / ``token``: ``{'key': 'lm_head'}`` is not a secret
        "bare": Policy(None, False, 16, True, True, 3.0),
        # a string after a secret word with no key shape: ``HF token hf...``
        "near": Policy(None, False, 20, True, True, 3.0),
    }
)

_WORDS = r"(?:[a-z0-9]+_)*"
#: (normalised key pattern, policy or None): the first row that matches the whole key wins.
#: Keys are normalised to lower-case words joined by ``_`` (``X-Amz-Signature`` →
#: ``x_amz_signature``, ``apiKey`` → ``api_key``).
KEY_SHAPES = tuple(
    (LazyPattern(pattern), policy)
    for pattern, policy in (
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
        (_WORDS + r"(?:sig|cookie|set_cookie)", "strong"),
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
)
_SECRETISH = re.compile(r"(?i)key|token|secret|pass|pwd|credential|sig|auth|cookie|config")
_AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "digest", "negotiate", "apikey"})
_TRIVIAL = frozenset(
    {
        "", "none", "null", "nil", "undefined", "true", "false", "yes", "no", "on", "off", "auto",
        "default", "unset", "empty", "disabled", "enabled", "required", "optional", "n/a", "na",
        "{}", "[]", "()", "''", '""', "-", "***", "...", "redacted",
    }
)  # fmt: skip

_VALUE = (
    r"""(?P<value>'(?:[^'\\\n]|\\.)*(?:'|$)|"(?:[^"\\\n]|\\.)*(?:"|$)"""
    r"""|\{(?:[^{}\n]|\{[^{}\n]*\})*\}|\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]"""
    r"""|[^\s,;&'"(){}\[\]<>…]+)"""
)
_TOKEN_CHARS = r"[A-Za-z0-9+/=_\-.~%]"


class Shape(NamedTuple):
    """One shape a secret comes in: its regex has a ``value`` group (what is masked)."""

    name: str
    example: str
    pattern: re.Pattern[str]
    judge: str  # "keyed": the ``key`` group's policy decides; "userinfo"; "always"; a policy


SHAPES = (
    Shape(
        "key = value, 'key': 'value', \"key\": \"value\", header, query parameter",
        "WANDB_API_KEY=…  'api_key': '…'  x-api-key: …  ?X-Amz-Signature=…",
        re.compile(
            r"""(?<![\w.\-/])(?P<q>['"]?)(?P<key>[A-Za-z_#$][\w.\-]{0,63})(?P=q)"""
            r"""(?P<sep>[ \t]*:(?![:/])[ \t]*|=(?!=)|[ \t]+=[ \t]*(?=['"{]))""" + _VALUE
        ),
        "keyed",
    ),
    Shape(
        "--flag value, --flag=value",
        "--hf-token …  --api-key=…",
        re.compile(
            r"""(?<![\w\-])(?P<key>--[A-Za-z][\w\-]{0,63})(?P<sep>=|[ \t]+)"""
            r"""(?P<value>'[^'\n]*(?:'|$)|"[^"\n]*(?:"|$)|(?!-)[^\s'"]+)"""
        ),
        "keyed",
    ),
    Shape(
        "Authorization header",
        "Authorization: Basic …",
        re.compile(
            r"""(?i)(?<![\w\-])(?:proxy-)?authori[sz]ation['"]?[ \t]*[:=][ \t]*['"]?"""
            r"""(?:(?:basic|bearer|token|digest|negotiate|apikey)[ \t]+)?(?P<value>[^\s'",;]+)"""
        ),
        "always",
    ),
    Shape(
        "Bearer token",
        "Bearer …",
        re.compile(r"(?i)\bbearer[ \t]+(?P<value>[A-Za-z0-9._~+/=\-]{8,})"),
        "always",
    ),
    Shape(
        "userinfo in any URL (the last @ before the host)",
        "redis://:…@h  postgres://u:…@db:5432/x",
        re.compile(
            r"""\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:@/'"]{0,256}:(?P<value>[^\s'"]{1,256})"""
            r"""@[^\s@/'"?#]*"""
        ),
        "userinfo",
    ),
    Shape(
        "known token prefixes",
        "sk-… sk-ant-… hf_… ghp_… github_pat_… glpat-… xoxb-… AKIA… AIza… npm_… pypi-… eyJ…",
        re.compile(
            r"(?P<value>\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}"
            r"|\bhf_[A-Za-z0-9]{20,}"
            r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
            r"|\bglpat-[A-Za-z0-9_\-]{20,}"
            r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
            r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
            r"|\bAIza[0-9A-Za-z_\-]{30,}"
            r"|\bnpm_[A-Za-z0-9]{30,}"
            r"|\bpypi-[A-Za-z0-9_\-]{40,}"
            r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
        ),
        "always",
    ),
    Shape(
        "a high-entropy string of token length next to a secret word",
        "HF token: …  password is …",
        re.compile(
            r"""(?i)(?<![a-z])(?:api[ _-]?key|key|token|secret|password|passwd|pwd|passphrase"""
            r"""|credentials?|signature|auth[a-z]*)(?![a-z])(?:[ \t]+is)?[\s:=>'"(,]{1,4}"""
            rf"(?P<value>{_TOKEN_CHARS}{{20,}})"
        ),
        "near",
    ),
)


class _Span(NamedTuple):
    start: int  # the whole shape (key and value): a cut never splits it
    end: int
    value_start: int  # what is masked
    value_end: int


def _normalise(key: str) -> str:
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key)
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


def key_policy(key: str) -> Policy | None:
    """The policy for a value under ``key``, or None when the name names no secret."""
    if not _SECRETISH.search(key):
        return None
    norm = _normalise(key)
    for pattern, policy in KEY_SHAPES:
        if pattern.fullmatch(norm):
            return None if policy is None else POLICIES[policy]
    return None


_NUMBER = LazyPattern(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = LazyPattern(r"[A-Za-z]{1,12}")
_TOKENISH = LazyPattern(_TOKEN_CHARS + r"+")
_PIECES = LazyPattern(r"[/\-._:]+")


def _classes(s: str) -> int:
    return (
        any(c.islower() for c in s)
        + any(c.isupper() for c in s)
        + any(c.isdigit() for c in s)
        + any(not c.isalnum() for c in s)
    )


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(k / n * math.log2(k / n) for k in Counter(s).values())


def is_secret(policy: Policy, value: str) -> bool:
    """Whether ``value`` (quotes removed) is a secret under ``policy``."""
    s = value.strip()
    if s.lower() in _TRIVIAL or MASK in s or s.startswith("$") or set(s) <= {"*", "x", "X"}:
        return False
    if _NUMBER.fullmatch(s):
        return policy.numbers_from is not None and sum(c.isdigit() for c in s) >= (
            policy.numbers_from
        )
    if len(s) < policy.min_len or (not policy.words and _WORD.fullmatch(s)):
        return False
    if policy.tokenish and (not _TOKENISH.fullmatch(s) or _classes(s) < 2):
        return False
    if policy.names:
        pieces = [p for p in _PIECES.split(s) if p]
        if len(pieces) >= 2 and max(len(p) for p in pieces) <= 12:
            return False  # Llama-3.1-8B-Instruct, a UUID, a dotted version
    return _entropy(s) >= policy.entropy


def _judge(shape: Shape, m: re.Match[str], line: str) -> tuple[int, int] | None:
    """The span to mask for one match, or None when it is no secret."""
    vs, ve = m.span("value")
    value = m.group("value")
    if MASK in value:
        return None
    if shape.judge == "keyed":
        key = m.group("key")
        policy = key_policy(key)
        if policy is None:
            return None
        if (
            (m.start() > 0 and line[m.start() - 1] in "?&;")  # a query parameter: ?token=
            or key.startswith("--")  # an option that takes a secret: --token X
            or (key.upper() == key and not key.startswith("#"))  # an environment variable
        ):
            policy = POLICIES["strong"]
        if value[:1] in "'\"":
            vs += 1
            if len(value) > 1 and value[-1] == value[0]:
                ve -= 1
        inner = line[vs:ve]
        if inner.lower() in _AUTH_SCHEMES:
            return None  # Authorization: Bearer …: the token after the scheme is the secret
        if value[:1] in "{[":  # a config blob or a list: masked whole under a secret name
            if value.replace(" ", "") in ("{}", "[]", "[None]") or policy.tokenish:
                return None
        elif not is_secret(policy, inner):
            return None
    elif shape.judge == "userinfo":
        if re.fullmatch(r"\d{1,5}(?:[/?#].*)?", value):
            return None  # host:port/path@…, not a password
    elif shape.judge != "always" and not is_secret(POLICIES[shape.judge], value):
        return None
    return (vs, ve) if ve > vs else None


_CONTINUATION = LazyPattern(rf"[ \t]*(?P<value>{_TOKEN_CHARS}{{4,}})(?P<end>['\"]?[ \t\r]*$)?")
_PLAIN_WORD = LazyPattern(r"[A-Z]?[a-z]{1,15}")


def _continuation(line: str) -> tuple[int, int] | None:
    """The token characters that start ``line``, when they look like the rest of a secret."""
    m = _CONTINUATION.match(line)
    if m is None:
        return None
    value = m.group("value")
    if _PLAIN_WORD.fullmatch(value):
        return None
    if m.group("end") is None:  # more text follows: only a long clear token, then a space
        after = line[m.end("value") : m.end("value") + 1]
        if not after.isspace() or not is_secret(POLICIES["bare"], value):
            return None
    return m.span("value")


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _matches(shape: Shape, line: str) -> list[_Span]:
    """The secrets of one shape in one line. A match that is no secret is searched again from
    its value, so ``'model_args': '{"api_key": "…"}'`` still finds the inner key."""
    out = []
    pos = 0
    while (m := shape.pattern.search(line, pos)) is not None:
        value = _judge(shape, m, line)
        if value is not None:
            out.append(_Span(m.start(), m.end(), *value))
            pos = m.end()
        else:
            pos = max(m.start("value"), m.start() + 1)
    return out


def _scan(text: str, carried: bool = False) -> tuple[list[_Span], bool]:
    """Every secret in ``text`` (offsets into it), and whether the last line ends in one.

    ``carried``: the line before ``text`` ended in a masked value.
    """
    found: list[_Span] = []
    offset = 0
    for line in text.split("\n"):
        spans: list[_Span] = []
        if carried and (cont := _continuation(line)) is not None:
            spans.append(_Span(*cont, *cont))
        for shape in SHAPES:
            spans.extend(_matches(shape, line))
        masked = _merge([(s.value_start, s.value_end) for s in spans])
        carried = bool(masked) and not line[masked[-1][1] :].strip(" \t\r…")
        found.extend(
            _Span(s.start + offset, s.end + offset, s.value_start + offset, s.value_end + offset)
            for s in spans
        )
        offset += len(line) + 1
    return found, carried


def mask(text: str, carried: bool = False) -> tuple[str, int, bool]:
    """``text`` with its secrets masked, how many, and whether it ends in one."""
    if not text:
        return text, 0, False
    spans, ended = _scan(text, carried)
    if not spans:
        return text, 0, ended
    masked = _merge([(s.value_start, s.value_end) for s in spans])
    parts, last = [], 0
    for s, e in masked:
        parts += [text[last:s], MASK]
        last = e
    parts.append(text[last:])
    return "".join(parts), len(masked), ended


def cut(text: str, limit: int, mark: str = "…") -> str:
    """``text`` cut to about ``limit`` characters, never inside a secret: the cut moves to the
    secret's end (at most ``CUT_SLACK`` further), else to its start. Redacting the cut text
    then masks the whole secret, so no start of one is left in clear."""
    if len(text) <= limit:
        return text
    at = limit
    # only the text around the cut is read: a secret longer than the window is not whole in it
    window = text[: limit + CUT_WINDOW]
    whole = _merge([(s.start, s.end) for s in _scan(window)[0]])
    for start, end in whole:
        if start < at < end:
            fits = end <= limit + CUT_SLACK and (end < len(window) or window == text)
            at = end if fits else start
            break
    return text if at >= len(text) else text[:at] + mark


def redact_text(text: str) -> str:
    """``text`` with every secret masked: for messages that echo a path or a log's text."""
    return mask(text)[0]
