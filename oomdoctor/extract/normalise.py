"""Strip the envelopes around a log message and remember what they said.

A wrapper's prefix (kubectl, docker compose, journald, a log platform, Markdown quoting, line
numbers) is not listed here: it is learned from the log itself (shape.py) and handed in as a
template, stripped first; what it held (a timestamp) is kept. Then the known outer prefixes,
which carry facts, are peeled (Ray's and vLLM's `(Name pid=N)`, torch's `[rankN]:`, a `> `
quote, a collector's RFC 3339 timestamp), and one inner envelope, the logger's own (SGLang,
SGLang Omni, vLLM, Python's default, c10, glog, torch_npu), is parsed.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import NamedTuple

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.units import integer

_ANSI = LazyPattern(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-B]")
#: Control characters, and the byte-order mark a Windows editor leaves at the start.
_CONTROL = LazyPattern(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff]")

# Outer prefixes, tried in order until none applies.
_QUOTE = LazyPattern(r"^[ ]{0,3}>[ ]?")
#: A collector's timestamp (kubectl --timestamps, Docker, CI viewers, log platforms): RFC 3339
#: with its `T` and zone, maybe bracketed. No engine prints this form (SGLang writes a space,
#: vLLM month-day, Omni a comma), so it is stripped wherever it starts a line.
_COLLECTOR_TS = LazyPattern(
    r"^\[?(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\]?\s"
)
_RAY = LazyPattern(r"^\((?P<actor>[\w.\-]+(?: [\w.\-=]+)*?) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s?")
#: torch.distributed's elastic agent prefixes every line of a rank: `[rank0]: `.
_TORCH_RANK = LazyPattern(r"^\[rank(?P<rank>\d+)\]:\s?")
#: vLLM worker prefixes name their rank: `(VllmWorker TP1 pid=N)`, `(VllmWorker PP0_TP1 pid=N)`,
#: `(VllmWorker rank=1 pid=N)`.
_ACTOR_RANK = LazyPattern(r"(?<![A-Za-z0-9])(?:(?P<pp>PP\d+)_)?(?P<tp>TP\d+)\b|\brank=(?P<n>\d+)")
_RAY_REPEAT = LazyPattern(r"\s*\[repeated \d+x across cluster\]\s*$")
#: A timestamp inside a learned prefix (any of the usual date-time forms), kept as the line's.
_PREFIX_TS = LazyPattern(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}"
)
#: SGLang 0.1.x - 0.2.12 put the GPU in the message (sglang-logs.md §10.1): a known shape that a
#: learned prefix stops before.
_SGLANG_GPU = LazyPattern(r"^\[gpu(?:_id)?=\d+\] ")
#: Python's own record starts, after a prefix nothing else explained (one line of a FastChat
#: or a cut vLLM header among other lines): the prefix ends with `] ` or `| ` and holds a
#: digit; what follows is a traceback's head or an exception line.
_RECORD_AFTER = LazyPattern(
    r"^(?P<head>[^'\"]{0,100}?\d[^'\"]{0,100}?[\]|] )(?=Traceback \(most recent call last\):|"
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): )"
)

# Inner envelopes (the logger's format).
_SGLANG = LazyPattern(
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3}))?"
    r"(?P<tags>(?: (?:[A-Z_]+-?\d+|encode_server|encode_dp_worker\[\d+\]))*)\] ?"
)
_SGLANG_TIME = LazyPattern(  # 0.2.14 - 0.3.2: time only (also what a trimmed paste leaves)
    r"^\[(?P<ts>\d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3}))?(?P<tags>(?: [A-Z_]+-?\d+)*)\] ?"
)
_SGLANG_NOYEAR = LazyPattern(  # sglang/multimodal_gen: datefmt without the year
    r"^\[(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?P<tags>(?: [A-Z_]+-?\d+)*)\] ?"
)
_OMNI = LazyPattern(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(?P<ms>\d{3}) \[(?P<level>[A-Z]+)\] "
    r"(?P<logger>[\w.\-]+): ?"
)
_VLLM = LazyPattern(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
    r"(?:\.\d+)? \[?(?P<src>[\w.\-]+:\d+)\] ?"
)
#: A worker prefix and vLLM's envelope in one pattern (worker_record): the prefix can only end
#: at the line's first `)`, so the split is the one peeling it first gives.
_WORKER_RECORD = LazyPattern(_RAY.pattern + _VLLM.pattern[1:])
_PYLOG = LazyPattern(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.\-]+):")
#: c10's C++ logger (pytorch-oom.md §5.5), after any `[rankN]:`: `[W812 16:00:28.64 file.cpp:N] `.
_TORCH_CPP = LazyPattern(
    r"^\[(?P<sev>[IWEF])(?:\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)?)? (?P<src>[\w.\-]+:\d+)\] ?"
)
#: Python's glog-style torch logging: `W1223 23:34:22.775000 1116 torch/utils/x.py:2425] `.
_GLOG = LazyPattern(r"^(?P<sev>[IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ (?P<src>[\w./\-]+:\d+)\] ?")
#: torch_npu's error trailer: `[ERROR] 2026-01-07-02:38:42 (PID:1, Device:0, RankID:-1) `.
_ASCEND = LazyPattern(
    r"^\[(?P<level>ERROR|WARN|WARNING|INFO|DEBUG|EVENT)\] (?P<ts>\d{4}-\d{2}-\d{2}-\d{2}:\d{2}:\d{2})"
    r" \(PID:\d+, Device:-?\d+, RankID:(?P<rank>-?\d+)\) "
)
_LEVELS = MappingProxyType({"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"})
#: Loggers that make an Omni-format line an SGLang (Omni) line.
_SGLANG_LOGGERS = ("sglang_omni", "stage_workers", "sglang.")
_TAG = LazyPattern(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(-?\d+)")
_DIGITS = LazyPattern(r"-?\d+")


class Inner(NamedTuple):
    """What a logger envelope says: the message after it, and its style and fields."""

    text: str
    style: str | None = None
    rank: str | None = None
    ts: str | None = None
    level: str | None = None
    logger: str | None = None


#: A caller's memo of _inner: the text after the outer prefixes → its Inner.
InnerMemo = dict[str, Inner]
#: Texts remembered at most (then the memo starts afresh), and the longest one remembered.
MEMO_SIZE = 4096
MEMO_TEXT = 1000
#: The first characters of an outer prefix (a collector's time also starts with a digit).
_OUTER_FIRST = frozenset("[(> ")
_QUOTE_FIRST = frozenset("> ")
#: A rank shorter than this holds no number beyond units.MAX_NUMBER (19 digits).
_LONG_NUMBER = 19


class Envelope(NamedTuple):
    text: str
    rank: str | None = None
    ts: str | None = None
    actor_pid: int | None = None
    level: str | None = None
    logger: str | None = None
    enveloped: bool = False  # an inner logger envelope was found (a record starts here)
    style: str | None = None  # which envelope (knowledge/engines.toml lists the styles)
    actor: str | None = None  # the process name of a `(Name pid=N)` prefix


def clean(raw: str) -> str:
    """Remove ANSI sequences, NULs and other control characters (tabs are kept)."""
    if raw.isprintable():  # every character removed is unprintable: most lines end here
        return raw
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    return _CONTROL.sub("", raw)


def normalise(
    raw: str, prefix: re.Pattern[str] | None = None, memo: InnerMemo | None = None
) -> Envelope:
    """Split one physical line into its message and the envelope facts around it.

    ``prefix``: the template of the wrapper's prefix learned for this input (shape.py), if any.
    ``memo``: the caller's memo of logger envelopes (text after the outer prefixes → what its
    envelope said): the workers of one job print the same record, each behind its own prefix.
    """
    text = clean(raw).rstrip("\n")
    outer = _Outer()
    if prefix is not None:
        m = prefix.match(text)
        if m is not None and m.end():
            outer.learned(text[: m.end()])
            text = text[m.end() :]
    text = _peel_all(text, outer)
    if "[repeated" in text:
        text = _RAY_REPEAT.sub("", text)
    if memo is None or len(text) > MEMO_TEXT:
        return _env(*_inner(text), outer)
    found = memo.get(text)
    if found is None:
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        found = memo[text] = _inner(text)
    return _env(*found, outer)


def outer_length(text: str) -> int:
    """How much of a (clean) line the known outer prefixes take (`(Name pid=N) `, `[rankN]: `,
    a quote, a collector's time), 0 if none."""
    return len(text) - len(_peel_all(text, _Outer()))


def _peel_all(text: str, outer: _Outer) -> str:
    """``text`` without its known outer prefixes (they nest at most a few deep)."""
    for _ in range(8):
        first = text[:1]
        if not first or (first not in _OUTER_FIRST and not first.isdigit()):
            break  # no outer prefix starts so (a superset of the digits \d matches)
        before = text
        text = outer.peel(text)
        if text == before:
            break
    return text


def _pid(digits: str) -> int | None:
    """A prefix's `pid=` digits as a number (units.integer, without its checks where the digits
    are too few to leave the range)."""
    return int(digits) if len(digits) < _LONG_NUMBER else integer(digits)


def actor_prefix(head: str) -> tuple[str, int] | None:
    """(name, PID) when ``head`` is exactly a `(Name pid=N)` process prefix, as normalise reads
    it (a PID beyond units.MAX_NUMBER is none); else None."""
    m = _RAY.match(head)
    if m is None or m.end() != len(head):
        return None
    actor, digits = m.group("actor", "pid")
    pid = _pid(digits)
    return None if pid is None else (actor, pid)


def worker_record(line: str) -> tuple[str, int, str, str] | None:
    """(name, PID, envelope style, message) of a printable line that is a `(Name pid=N) `
    prefix and a vLLM record (`INFO 05-01 10:00:05 [file.py:N] message`), read exactly as
    normalise reads it (one match of the two patterns joined); None for any other line."""
    m = _WORKER_RECORD.match(line)
    if m is None or "[repeated" in line or not line.isprintable():
        return None
    actor, digits = m.group("actor", "pid")
    pid = _pid(digits)
    if pid is None:
        return None
    style = "vllm" if "[" in line[m.start("level") : m.end()] else "vllm-old"
    return actor, pid, style, line[m.end() :]


def known_at(text: str) -> bool:
    """Whether ``text`` starts with a prefix or envelope this module parses (a learned prefix
    ends before it: what it says is read, not stripped blind)."""
    text = clean(text)
    if _RAY.match(text) or _TORCH_RANK.match(text) or _SGLANG_GPU.match(text):
        return True
    return _inner(text)[1] is not None


class _Outer:
    """What the collector prefixes said (the first timestamp and the innermost actor win)."""

    __slots__ = ("actor", "actor_pid", "actor_rank", "ts")

    def __init__(self) -> None:
        self.ts: str | None = None
        self.actor_pid: int | None = None
        self.actor: str | None = None
        self.actor_rank: str | None = None

    def learned(self, head: str) -> None:
        """What a learned prefix said: its timestamp, where it has one."""
        m = _PREFIX_TS.search(head)
        if m is not None:
            self.ts = self.ts or m.group().replace("T", " ")

    def peel(self, text: str) -> str:
        # Each prefix is only tried where the text starts as it must (a pattern's first
        # character; a collector's time may start with any digit \d matches).
        first = text[:1]
        m = _COLLECTOR_TS.match(text) if first == "[" or first.isdigit() else None
        if m:
            self.ts = self.ts or m.group("ts").replace("T", " ").rstrip("Z")
            text = text[m.end() :]
        m = _RAY.match(text) if text[:1] == "(" else None
        if m:
            pid, actor = m.group("pid", "actor")
            self.actor_pid = _pid(pid)
            self.actor = actor
            self.actor_rank = _actor_rank(actor) or self.actor_rank
            text = text[m.end() :]
        m = _TORCH_RANK.match(text) if text[:1] == "[" else None
        if m:
            self.actor_rank = self.actor_rank or f"TP{m.group('rank')}"
            text = text[m.end() :]
        m = _QUOTE.match(text) if text[:1] in _QUOTE_FIRST else None
        if m:
            text = text[m.end() :]
        return text


def _actor_rank(actor: str) -> str | None:
    if " " not in actor or ("TP" not in actor and "rank=" not in actor):
        return None
    m = _ACTOR_RANK.search(actor)
    if m is None:
        return None
    if m.group("n") is not None:
        return f"TP{m.group('n')}"
    return f"{m.group('pp')} {m.group('tp')}" if m.group("pp") else m.group("tp")


def _env(
    text: str,
    style: str | None,
    rank: str | None,
    ts: str | None,
    level: str | None,
    logger: str | None,
    outer: _Outer,
) -> Envelope:
    """An Envelope: what the logger envelope said (_inner), with the outer prefixes' facts;
    ``style`` None means no logger envelope."""
    rank = rank or outer.actor_rank
    if (
        rank is not None
        and len(rank) >= _LONG_NUMBER
        and any(integer(n) is None for n in _DIGITS.findall(rank))
    ):
        rank = None  # numbered beyond any cluster (units.MAX_NUMBER): not a rank
    return Envelope(
        text=text,
        rank=rank,
        ts=ts or outer.ts,
        actor_pid=outer.actor_pid,
        level=level,
        logger=logger,
        enveloped=style is not None,
        style=style,
        actor=outer.actor,
    )


def _inner(text: str) -> Inner:
    """What the logger's envelope at the start of ``text`` says (style None: none found)."""
    first = text[:1]
    if first == "[":
        m = _SGLANG.match(text) or _SGLANG_NOYEAR.match(text)
        style = "sglang"
        if m is None:
            m = _SGLANG_TIME.match(text)
            style = "sglang-time"
        if m:
            ts, ms = m.group("ts"), m.groupdict().get("ms")
            stamp = f"{ts}.{ms}" if ms else ts
            return Inner(text[m.end() :], style, _rank(m.group("tags")), stamp)
        m = _TORCH_CPP.match(text)
        if m:
            return Inner(text[m.end() :], "torch-cpp", level=_LEVELS[m.group("sev")])
        m = _ASCEND.match(text)
        if m:
            rank = integer(m.group("rank"))
            return Inner(
                text[m.end() :],
                "ascend",
                rank=f"TP{rank}" if rank is not None and rank >= 0 else None,
                ts=m.group("ts"),
                level=m.group("level"),
            )
    elif first.isdigit():
        m = _OMNI.match(text)
        if m:
            logger = m.group("logger")
            style = "omni-sglang" if logger.startswith(_SGLANG_LOGGERS) else "omni"
            stamp = f"{m.group('ts')}.{m.group('ms')}"
            return Inner(text[m.end() :], style, ts=stamp, level=m.group("level"), logger=logger)
    elif first in "DIWECF":
        m = _VLLM.match(text)
        if m is not None:
            style = "vllm" if "[" in text[: m.end()] else "vllm-old"
        else:
            m = _PYLOG.match(text)
            style = "pylog"
        if m is None:
            m = _GLOG.match(text)
            style = "glog"
        if m:
            gd = m.groupdict()
            return Inner(
                text[m.end() :],
                style,
                ts=gd.get("ts"),
                level=gd.get("level") or _LEVELS.get(gd.get("sev") or ""),
                logger=gd.get("logger"),
            )
    m = _RECORD_AFTER.match(text) if first not in " \t" else None
    if m is not None:
        return Inner(text[m.end() :])
    return Inner(text)


def _rank(tags: str) -> str | None:
    tags = tags.strip()
    if not tags:
        return None
    return " ".join(tags.split())


def rank_numbers(rank: str | None) -> dict[str, int]:
    """``"DP0 TP3"`` → ``{"DP": 0, "TP": 3}``."""
    if not rank:
        return {}
    return {name: n for name, num in _TAG.findall(rank) if (n := integer(num)) is not None}
