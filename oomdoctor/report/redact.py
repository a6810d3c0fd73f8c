"""Remove secrets from everything a report prints.

SGLang prints api_key, admin_api_key and ssl_keyfile_password in clear text in every server_args
line (sglang-logs.md §2.1); logs also carry tokens in URLs, headers and environment dumps.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "<redacted>"

_SECRET_FIELDS = (
    r"api_key|admin_api_key|ssl_keyfile_password|watermark_key(?:_b)?|watermark_config"
    r"|\w*_extra_config|modelexpress_config|kv_events_config|unified_cache_external_linker_config"
    r"|hf_token|HF_TOKEN|HUGGING_FACE_HUB_TOKEN|OPENAI_API_KEY|aws_secret_access_key"
    r"|AWS_SECRET_ACCESS_KEY|password|passwd"
)
# key=value / 'key': value / "key": value / KEY=value; the value is a quoted string, a {...} blob
# (one level of nesting), or a bare token.
_FIELD = re.compile(
    r"""(?P<key>['"]?\b(?:""" + _SECRET_FIELDS + r""")\b['"]?)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\{(?:[^{}]|\{[^{}]*\})*\}|[^\s,)}\]]+)"""
)
_FLAG = re.compile(
    r"(?P<key>--(?:admin-)?api-key|--ssl-keyfile-password)(?P<sep>[= ])(?P<value>\S+)"
)
_TOKENS = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"
    r"|\bxox[abpors]-[A-Za-z0-9-]{10,}"
    r"|\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"  # JWT
)
_BEARER = re.compile(r"(?i)(?P<key>\b(?:bearer|token)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{12,})")
_AUTH = re.compile(r"(?i)(?P<key>\bauthorization\s*[:=]\s*)(?P<value>(?:basic|bearer)?\s*\S+)")
_URL_PASSWORD = re.compile(r"(?P<key>\b[a-z][a-z0-9+.\-]*://[^:/@\s]+:)(?P<value>[^@/\s]+)(?=@)")
_NOT_SECRET = frozenset(
    {"None", "null", "''", '""', "{}", "'{}'", '"{}"', "False", "True", "0", "", MASK}
)


class Redactor:
    """Replaces secrets in strings and counts how many it replaced."""

    def __init__(self) -> None:
        self.count = 0

    def _keyed(self, m: re.Match[str]) -> str:
        value = m.group("value")
        if value.strip("'\"") in _NOT_SECRET or value in _NOT_SECRET or MASK in value:
            return m.group(0)
        self.count += 1
        quote = value[0] if value[:1] in "'\"" and value[-1:] == value[:1] else ""
        sep = m.groupdict().get("sep") or ""
        return f"{m.group('key')}{sep}{quote}{MASK}{quote}"

    def _token(self, m: re.Match[str]) -> str:
        self.count += 1
        return MASK

    def text(self, s: str) -> str:
        if not s:
            return s
        s = _FIELD.sub(self._keyed, s)
        s = _FLAG.sub(self._keyed, s)
        s = _URL_PASSWORD.sub(self._keyed, s)
        s = _AUTH.sub(self._keyed, s)
        s = _BEARER.sub(self._keyed, s)
        return _TOKENS.sub(self._token, s)

    def walk(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if (
                    isinstance(k, str)
                    and re.fullmatch(_SECRET_FIELDS, k)
                    and v not in (None, "", False)
                ):
                    self.count += 1
                    out[k] = MASK
                else:
                    out[k] = self.walk(v)
            return out
        if isinstance(value, list | tuple):
            return [self.walk(v) for v in value]
        return value


def redact_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report with secrets masked and ``redactions`` set to how many were masked."""
    r = Redactor()
    clean: dict[str, Any] = r.walk(report)
    clean["redactions"] = r.count
    return clean
