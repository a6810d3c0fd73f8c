"""Find secrets in text by their shape, not by a list of names.

SGLang prints api_key, admin_api_key and ssl_keyfile_password in clear text in every server_args
line (sglang-logs.md §2.1); logs also carry tokens in URLs, headers, flags and environment dumps.
A secret is found by the shape around it (``SHAPES``, in :mod:`.secret_shapes`): a key, flag,
header, query parameter or name/value pair whose name names a secret (``KEY_SHAPES``), with a
value that its policy (``POLICIES``, in :mod:`.secret_policy`) calls a secret; a URL's
userinfo; a webhook path; a client's password flag; a known token prefix; a high-entropy string
next to a secret word.

Some shapes span lines, and a line's state is carried to the next (``Carry``): a masked value
that runs to the end of a line masks the token characters that start the next line too (a
secret wrapped by hand); a PEM private-key block is masked up to its END line; a YAML or JSON
``name: HF_TOKEN`` line masks the ``value:`` on the line after it.

:mod:`oomdoctor.report.redact` applies this to a whole report and counts what each format shows.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.report.secret_policy import (
    AUTH_SCHEMES,
    MASK,
    POLICIES,
    TRIVIAL,
    Policy,
    is_secret,
    key_policy,
)
from oomdoctor.report.secret_shapes import (
    KEY_SHAPES,
    NAME_LINE,
    PEM_BEGIN,
    PEM_END,
    SHAPES,
    TOKEN_CHARS,
    VALUE_CAP,
    VALUE_LINE,
    Shape,
)

__all__ = [
    "KEY_SHAPES",
    "MASK",
    "POLICIES",
    "SHAPES",
    "Carry",
    "Policy",
    "cut",
    "is_secret",
    "key_policy",
    "mask",
    "redact_text",
]

#: What a line leaves to the next: "" nothing; "wrapped": it ended in a masked value; "named":
#: it named a secret env entry (``- name: HF_TOKEN``); "pem": it is inside a private-key block.
Carry = Literal["", "wrapped", "named", "pem"]

#: How far past its limit a cut may move to keep a secret whole (else it stops before it).
CUT_SLACK = 200
#: How much text past its limit a cut reads to find the secrets around it.
CUT_WINDOW = 4096


class _Span(NamedTuple):
    start: int  # the whole shape (key and value): a cut never splits it
    end: int
    value_start: int  # what is masked
    value_end: int


_REST = LazyPattern(r"""[^\s,;&'"(){}\[\]<>…\\]{1,65536}""")
_CLIENT_GROUPS = ("value", "v2", "v3", "v4")
_RUN = LazyPattern(r"[A-Za-z0-9_\-]{1,512}")
_UID_GID = LazyPattern(r"\d{1,10}")


_OPENING = LazyPattern(r"""b?\\?['"]""")


def _unquoted(line: str, vs: int, ve: int) -> tuple[int, int]:
    """The span inside a value's quotes: ``'…'``, ``"…"``, ``b'…'``, ``\\"…\\"``."""
    opening = _OPENING.match(line, vs, ve)
    if opening is None:
        return vs, ve
    quote = opening.group().lstrip("b")
    vs = opening.end()
    if ve - vs >= len(quote) and line.startswith(quote, ve - len(quote)):
        ve -= len(quote)
    return vs, ve


def _judge(shape: Shape, m: re.Match[str], line: str) -> tuple[int, int] | None:
    """The span to mask for one match, or None when it is no secret."""
    if shape.judge == "client":
        group = next(g for g in _CLIENT_GROUPS if m.group(g) is not None)
        vs, ve = _unquoted(line, *m.span(group))
        inner = line[vs:ve]
        if inner.lower() in TRIVIAL or MASK in inner or _UID_GID.fullmatch(inner):
            return None  # docker -u 1000:1000 is a uid and a gid
        return (vs, ve) if ve > vs else None
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
        vs, ve = _unquoted(line, vs, ve)
        inner = line[vs:ve]
        if inner.lower() in AUTH_SCHEMES:
            return None  # Authorization: Bearer …: the token after the scheme is the secret
        if value[:1] in "{[":  # a config blob or a list: masked whole under a secret name
            if value.replace(" ", "") in ("{}", "[]", "[None]") or policy.tokenish:
                return None
        elif not is_secret(policy, inner):
            return None
    elif shape.judge == "userinfo":
        if re.fullmatch(r"\d{1,5}(?:[/?#].*)?", value):
            return None  # host:port/path@…, not a password
    elif shape.judge == "prefix":
        if vs > 0 and (line[vs - 1].isalnum() or line[vs - 1] == "_"):
            return None  # inside a longer word
        if (run := _RUN.match(line, ve)) is not None:
            ve = run.end()  # a token longer than the table's shape is masked whole
    elif shape.judge != "always" and not is_secret(POLICIES[shape.judge], value):
        return None
    if ve - m.start("value") >= VALUE_CAP and (rest := _REST.match(line, ve)) is not None:
        ve = rest.end()  # longer than a shape reads: masked to the end of its run
    return (vs, ve) if ve > vs else None


_CONTINUATION = LazyPattern(rf"[ \t]*(?P<value>{TOKEN_CHARS}{{4,}})(?P<end>['\"]?[ \t\r]*$)?")
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
            out.append(_Span(m.start(), max(m.end(), value[1]), *value))
            pos = max(m.end(), value[1])
        elif shape.judge == "near":  # no key inside a token to search again for
            pos = m.end()
        else:
            pos = max(m.start("value"), m.start() + 1)
    return out


def _carried(line: str, carried: Carry) -> tuple[list[_Span], Carry | None]:
    """What the line before makes a secret at the start of ``line``, and, inside a PEM block,
    the state after it (None: read the line's own shapes)."""
    if carried == "pem":
        end = line.find(PEM_END)
        stop = len(line.rstrip("\r")) if end < 0 else end
        return ([_Span(0, stop, 0, stop)] if line[:stop].strip() else []), (
            "pem" if end < 0 else None
        )
    if carried == "wrapped" and (cont := _continuation(line)) is not None:
        return [_Span(*cont, *cont)], None
    if carried == "named" and (m := VALUE_LINE.match(line)) is not None:
        vs, ve = _unquoted(line, *m.span("value"))
        if is_secret(POLICIES["strong"], line[vs:ve]):
            return [_Span(m.start(), m.end(), vs, ve)], None
    return [], None


def _pem(line: str) -> tuple[list[_Span], bool]:
    """The bodies of the private-key blocks that open in ``line``, and whether the last one
    is still open at its end."""
    spans: list[_Span] = []
    pos = 0
    while (m := PEM_BEGIN.search(line, pos)) is not None:
        end = line.find(PEM_END, m.end())
        stop = len(line.rstrip("\r")) if end < 0 else end
        if line[m.end() : stop].strip(" \t\\n"):
            spans.append(_Span(m.start(), stop, m.end(), stop))
        if end < 0:
            return spans, True
        pos = end + len(PEM_END)
    return spans, False


def _scan(text: str, carried: Carry = "") -> tuple[list[_Span], Carry]:
    """Every secret in ``text`` (offsets into it), and what its last line carries over.

    ``carried``: what the line before ``text`` left (``Carry``).
    """
    found: list[_Span] = []
    offset = 0
    for line in text.split("\n"):
        spans, state = _carried(line, carried)
        if state is not None:  # the whole line is inside a PEM block
            carried = state
        else:
            for shape in SHAPES:
                spans.extend(_matches(shape, line))
            pem, still_open = _pem(line)
            spans += pem
            masked = _merge([(s.value_start, s.value_end) for s in spans])
            carried = (
                "pem"
                if still_open
                else "wrapped"
                if masked and not line[masked[-1][1] :].strip(" \t\r…")
                else "named"
                if (name := NAME_LINE.fullmatch(line)) and key_policy(name.group("key"))
                else ""
            )
        found.extend(
            _Span(s.start + offset, s.end + offset, s.value_start + offset, s.value_end + offset)
            for s in spans
        )
        offset += len(line) + 1
    return found, carried


def mask(text: str, carried: Carry = "") -> tuple[str, int, Carry]:
    """``text`` with its secrets masked, how many, and what its last line carries over."""
    if not text:
        return text, 0, ""
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
