"""Strip the envelopes around a log message and remember what they said.

Outer prefixes come from the way the log was collected (kubectl, docker compose, Ray, journald,
Markdown quoting in an issue, ANSI colour); the inner envelope is the logger's own (SGLang,
SGLang Omni, vLLM, Python's default). Outer ones are peeled repeatedly, the inner one once.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-B]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# Outer prefixes, tried in order until none applies.
_QUOTE = re.compile(r"^[ ]{0,3}>[ ]?")
_KUBECTL_TS = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s"
)
_KUBECTL_PREFIX = re.compile(r"^\[pod/[^\]\s]+\]\s")
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\|(?: |$)")
_RAY = re.compile(r"^\((?P<actor>[\w.\-]+(?: [\w.\-=]+)*?) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s?")
#: vLLM worker prefixes name their rank: `(VllmWorker TP1 pid=N)`, `(VllmWorker PP0_TP1 pid=N)`,
#: `(VllmWorker rank=1 pid=N)`.
_ACTOR_RANK = re.compile(r"(?<![A-Za-z0-9])(?:(?P<pp>PP\d+)_)?(?P<tp>TP\d+)\b|\brank=(?P<n>\d+)")
_JOURNALD = re.compile(
    r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}) \S+ [\w.\-/@]+(?:\[\d+\])?: "
)
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")

# Inner envelopes (the logger's format).
_SGLANG = re.compile(
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3}))?"
    r"(?P<tags>(?: (?:[A-Z_]+-?\d+|encode_server|encode_dp_worker\[\d+\]))*)\] ?"
)
_SGLANG_NOYEAR = re.compile(  # sglang/multimodal_gen: datefmt without the year
    r"^\[(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?P<tags>(?: [A-Z_]+-?\d+)*)\] ?"
)
_OMNI = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(?P<ms>\d{3}) \[(?P<level>[A-Z]+)\] "
    r"(?P<logger>[\w.\-]+): ?"
)
_VLLM = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
    r"(?:\.\d+)? \[?(?P<src>[\w.\-]+:\d+)\] ?"
)
_PYLOG = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.\-]+):")
_ISO_LEVEL = re.compile(  # generic "2025-01-01 12:00:00[.,]123 LEVEL ..." / "... | LEVEL | ..."
    r"^(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\s*(?:\|\s*)?"
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s*(?:\|\s*)?(?:[\w.\-]+:\d+\s*(?:-\s*)?)?"
)
_TAG = re.compile(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(-?\d+)")


class Envelope(NamedTuple):
    text: str
    rank: str | None = None
    ts: str | None = None
    actor_pid: int | None = None
    level: str | None = None
    logger: str | None = None
    enveloped: bool = False  # an inner logger envelope was found (a record starts here)


def clean(raw: str) -> str:
    """Remove ANSI sequences, NULs and other control characters (tabs are kept)."""
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    return _CONTROL.sub("", raw)


def normalise(raw: str) -> Envelope:
    """Split one physical line into its message and the envelope facts around it."""
    text = clean(raw).rstrip("\n")
    outer_ts: str | None = None
    actor_pid: int | None = None
    actor_rank: str | None = None
    for _ in range(6):  # outer prefixes nest at most a few deep
        before = text
        m = _KUBECTL_TS.match(text)
        if m:
            outer_ts = outer_ts or m.group("ts")
            text = text[m.end() :]
        m = _KUBECTL_PREFIX.match(text)
        if m:
            text = text[m.end() :]
        m = _JOURNALD.match(text)
        if m:
            outer_ts = outer_ts or m.group("ts")
            text = text[m.end() :]
        m = _COMPOSE.match(text)
        if m:
            text = text[m.end() :]
        m = _RAY.match(text)
        if m:
            actor_pid = int(m.group("pid"))
            actor_rank = actor_rank or _actor_rank(m.group("actor"))
            text = text[m.end() :]
        m = _QUOTE.match(text)
        if m:
            text = text[m.end() :]
        if text == before:
            break
    if "[repeated" in text:
        text = _RAY_REPEAT.sub("", text)
    return _inner(text, outer_ts, actor_pid, actor_rank)


def _actor_rank(actor: str) -> str | None:
    if " " not in actor:
        return None
    m = _ACTOR_RANK.search(actor)
    if m is None:
        return None
    if m.group("n") is not None:
        return f"TP{m.group('n')}"
    return f"{m.group('pp')} {m.group('tp')}" if m.group("pp") else m.group("tp")


def _inner(
    text: str, outer_ts: str | None, actor_pid: int | None, actor_rank: str | None = None
) -> Envelope:
    first = text[:1]
    if first == "[":
        m = _SGLANG.match(text) or _SGLANG_NOYEAR.match(text)
        if m:
            ts = m.group("ts")
            ms = m.groupdict().get("ms")
            return Envelope(
                text=text[m.end() :],
                rank=_rank(m.group("tags")) or actor_rank,
                ts=f"{ts}.{ms}" if ms else ts,
                actor_pid=actor_pid,
                enveloped=True,
            )
    elif first.isdigit():
        m = _OMNI.match(text)
        if m:
            return Envelope(
                text=text[m.end() :],
                ts=f"{m.group('ts')}.{m.group('ms')}",
                actor_pid=actor_pid,
                level=m.group("level"),
                logger=m.group("logger"),
                enveloped=True,
            )
        m = _ISO_LEVEL.match(text)
        if m:
            return Envelope(
                text=text[m.end() :],
                ts=m.group("ts"),
                actor_pid=actor_pid,
                level=m.group("level"),
                enveloped=True,
            )
    elif first in "DIWEC":
        m = _VLLM.match(text) or _PYLOG.match(text)
        if m:
            gd = m.groupdict()
            return Envelope(
                text=text[m.end() :],
                rank=actor_rank,
                ts=gd.get("ts") or outer_ts,
                actor_pid=actor_pid,
                level=gd.get("level"),
                logger=gd.get("logger"),
                enveloped=True,
            )
    return Envelope(text=text, rank=actor_rank, ts=outer_ts, actor_pid=actor_pid)


def _rank(tags: str) -> str | None:
    tags = tags.strip()
    if not tags:
        return None
    return " ".join(tags.split())


def rank_numbers(rank: str | None) -> dict[str, int]:
    """``"DP0 TP3"`` → ``{"DP": 0, "TP": 3}``."""
    if not rank:
        return {}
    return {name: int(num) for name, num in _TAG.findall(rank)}
