"""Logs shipped as one JSON object a line (Docker's json-file, GCP, Loki, `journalctl -o json`,
any structured logger): which field holds the log line, chosen from the data, and the text out.

The field is the string that reads like a log line: it varies from record to record, it is
long, and it has spaces in it (a cursor or an id varies too, but is one word). A nested object
is looked into (`jsonPayload.message`). A record's own time, where one field holds an
RFC 3339 timestamp, goes in front of its text, where the learned prefix reads it back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from oomdoctor.extract.lazy import LazyPattern

#: A sample is JSON lines when this share of its non-blank lines are JSON objects.
JSON_SHARE = 0.6
#: Nested objects are looked into this deep (`jsonPayload.message`).
MAX_DEPTH = 3
#: Names a log line is often kept under: they only break ties between fields the data ranks
#: alike (a one-record sample).
USUAL = ("log", "message", "msg", "MESSAGE", "textPayload", "line", "body", "text")
_RFC3339 = LazyPattern(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})$")


class JsonPlan(NamedTuple):
    """Where a record keeps its text and its time."""

    text: tuple[str, ...]  # the path of the text field
    time: tuple[str, ...] | None = None


def _object(line: str) -> dict[str, Any] | None:
    s = line.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return None
    import json  # loaded when a line looks like a JSON object (a start-up saved for the rest)

    try:
        value = json.loads(s)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _strings(
    obj: Mapping[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str]]:
    for key, value in obj.items():
        here = (*path, str(key))
        if isinstance(value, str):
            yield here, value
        elif isinstance(value, dict) and len(here) < MAX_DEPTH:
            yield from _strings(value, here)


def _get(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def detect(lines: Sequence[str]) -> JsonPlan | None:
    """The plan for a sample of JSON lines, or None when the sample is not JSON lines."""
    body = [ln for ln in lines if ln.strip()]
    objects = [o for o in (_object(ln) for ln in body) if o is not None]
    if not objects or len(objects) < JSON_SHARE * len(body):
        return None
    values: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for obj in objects:
        for path, value in _strings(obj):
            values[path].append(value)
    best: tuple[float, tuple[str, ...]] | None = None
    time: tuple[str, ...] | None = None
    for path, seen in values.items():
        if time is None and all(_RFC3339.match(v) for v in seen):
            time = path
            continue
        score = _score(path, seen, len(objects))
        if score > 0 and (best is None or score > best[0]):
            best = (score, path)
    if best is None:
        return None
    return JsonPlan(best[1], time)


def _score(path: tuple[str, ...], seen: Sequence[str], records: int) -> float:
    """How much a field reads like the log line: present, varied, long, words with spaces."""
    present = len(seen) / records
    if present < 0.5:
        return 0.0
    distinct = len(set(seen)) / len(seen)
    spaced = sum(1 for v in seen if " " in v.strip()) / len(seen)
    mean = sum(len(v) for v in seen) / len(seen)
    usual = 1.25 if path[-1] in USUAL else 1.0
    return present * (0.25 + distinct) * (0.1 + spaced) * mean * usual


def unpack(line: str, plan: JsonPlan) -> list[str] | None:
    """The log lines one record holds (several when its text has newlines), each after the
    record's time where it has one; None when the line is not such a record (kept as it is)."""
    obj = _object(line)
    if obj is None:
        return None
    text = _get(obj, plan.text)
    if not isinstance(text, str):
        return None
    stamp = _get(obj, plan.time) if plan.time is not None else None
    lead = f"{stamp} " if isinstance(stamp, str) and _RFC3339.match(stamp) else ""
    pieces = text.split("\n")
    if len(pieces) > 1 and pieces[-1] == "":
        pieces.pop()  # Docker's `"log": "text\n"`
    return [lead + p.rstrip("\r") for p in pieces]
