"""Remove secrets from everything a report prints (the shapes are in :mod:`.secrets`).

SGLang prints api_key, admin_api_key and ssl_keyfile_password in clear text in every server_args
line (sglang-logs.md §2.1); logs also carry tokens in URLs, headers, flags and environment dumps.
Every string of the report is masked; ``redactions`` counts only what the chosen format prints
(``SHOWN``). Evidence lines that follow each other in a log are redacted in order, so a secret
wrapped onto the next line is masked there too.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any

from oomdoctor.report.secrets import (
    MASK,
    POLICIES,
    Carry,
    cut,
    is_secret,
    key_policy,
    mask,
    redact_text,
)

__all__ = ["MASK", "SHOWN", "Redactor", "cut", "redact_report", "redact_text"]

#: The report fields each format prints (dotted paths, ``*`` for any key or list index); a
#: redaction elsewhere is masked but not counted. JSON prints everything.
_BOTH = (
    "verdict.summary",
    "verdict.why",
    "actions.*.text",
    "actions.*.basis",
    "actions.*.flag",
    "actions.*.value",
    "actions.*.current",
    "budget.stage",
    "budget.rank",
    "budget.gpu",
    "budget.ranks.*.stage",
    "budget.ranks.*.rank",
    "findings.*.rule",
    "findings.*.title",
    "findings.*.evidence.*.source",
    "findings.*.evidence.*.rank",
    "findings.*.evidence.*.text",
    "notices.*",
    "timeline.first_ts",
    "timeline.last_ts",
    "gpu.source",
    "gpu.time",
    "gpu.mapping",
    "gpu.devices.*.name",
    "gpu.devices.*.pci_bus_id",
    "gpu.processes.*.name",
    "gpu.processes.*.gpu_uuid",
    "input.sglang_version",
)
SHOWN = MappingProxyType(
    {
        "text": _BOTH,
        "markdown": (
            *_BOTH,
            "input.sources.*",
            "budget.*_basis",
            "findings.*.category",
            "picture.svg",
        ),
        "json": ("**",),
    }
)


_NAME_KEYS = ("name", "Name", "NAME", "key", "Key", "KEY")
_VALUE_KEYS = frozenset({"value", "Value", "VALUE"})


def _named_secret(d: dict[Any, Any]) -> bool:
    """Whether ``d`` is a name/value pair whose name names a secret: a Kubernetes or ECS env
    entry ``{"name": "HF_TOKEN", "value": "…"}``, an AWS tag ``{"Key": …, "Value": …}``."""
    if not _VALUE_KEYS & d.keys():
        return False
    name = next((d[k] for k in _NAME_KEYS if k in d), None)
    return isinstance(name, str) and key_policy(name) is not None


def _filled(v: Any) -> bool:
    return v not in (None, "", True, False) and not (isinstance(v, str) and MASK in v)


def _is_line_ref(v: Any) -> bool:
    return isinstance(v, dict) and {"source", "line", "text"} <= v.keys()


class Redactor:
    """Replaces secrets in strings and JSON-like values, and remembers where it replaced them."""

    def __init__(self) -> None:
        self.paths: list[tuple[str, ...]] = []

    @property
    def count(self) -> int:
        """How many secrets were masked, everywhere."""
        return len(self.paths)

    def shown(self, fmt: str) -> int:
        """How many of them are in fields that format ``fmt`` prints (``SHOWN``)."""
        patterns = [p.split(".") for p in SHOWN.get(fmt, ("**",))]
        return sum(
            any(
                p == ["**"] or (len(p) == len(path) and all(map(fnmatchcase, path, p)))
                for p in patterns
            )
            for path in self.paths
        )

    def _text(self, s: str, path: tuple[str, ...], carried: Carry = "") -> tuple[str, Carry]:
        out, n, ended = mask(s, carried)
        self.paths.extend([path] * n)
        return out, ended

    def text(self, s: str) -> str:
        """``s`` with its secrets masked."""
        return self._text(s, ())[0]

    def _field(self, key: Any, value: Any) -> bool:
        """Whether a dict's value is a secret because of its key (``{"hf_token": "…"}``)."""
        policy = key_policy(key) if isinstance(key, str) else None
        if policy is None or value is None or isinstance(value, bool):
            return False
        if isinstance(value, str | int | float):
            return is_secret(policy, str(value))
        return policy is POLICIES["strong"] and bool(value)

    def walk(self, value: Any, path: tuple[str, ...] = ()) -> Any:
        """A copy of a JSON-like value with every string redacted."""
        if isinstance(value, str):
            return self._text(value, path)[0]
        if isinstance(value, dict):
            out = {}
            named = _named_secret(value)
            for k, v in value.items():
                here = (*path, str(k))
                if self._field(k, v) or (named and k in _VALUE_KEYS and _filled(v)):
                    self.paths.append(here)
                    out[k] = MASK
                else:
                    out[k] = self.walk(v, here)
            return out
        if isinstance(value, list | tuple):
            return self._list(value, path)
        return value

    def _list(self, items: list[Any] | tuple[Any, ...], path: tuple[str, ...]) -> list[Any]:
        """Items in order; a line ref right below one whose text ended in a secret gets the
        continuation check (a secret wrapped over two log lines)."""
        out: list[Any] = []
        before: tuple[Any, Any, Carry] | None = None
        for i, item in enumerate(items):
            here = (*path, str(i))
            if not _is_line_ref(item):
                out.append(self.walk(item, here))
                before = None
                continue
            follows = (
                before is not None
                and before[0] == item["source"]
                and isinstance(item["line"], int)
                and item["line"] == before[1] + 1
            )
            carried: Carry = before[2] if before is not None and follows else ""
            ref: dict[str, Any] = {}
            ended: Carry = ""
            for k, v in item.items():
                if k == "text" and isinstance(v, str):
                    ref[k], ended = self._text(v, (*here, k), carried)
                else:
                    ref[k] = self.walk(v, (*here, k))
            out.append(ref)
            before = (item["source"], item["line"], ended)
        return out


def redact_report(report: dict[str, Any], fmt: str = "json") -> dict[str, Any]:
    """The report with every secret masked, and ``redactions`` set to how many of them the
    format ``fmt`` prints (``text``, ``markdown``; ``json`` prints them all)."""
    r = Redactor()
    clean: dict[str, Any] = r.walk(report)
    clean["redactions"] = r.shown(fmt)
    return clean
