"""Memory over time from the periodic stats lines, in bounded memory.

Points are kept in at most MAX_POINTS buckets; when they fill up, neighbours merge (each bucket
then covers twice the time), so any log length gives the same small summary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

MAX_POINTS = 240
#: A gap longer than this between stats lines is idle time, not time at high usage.
MAX_STEP_S = 600.0
HIGH_USAGE = 0.95


@dataclass(frozen=True, slots=True)
class Point:
    start: str  # timestamp of the first stats line in the bucket
    usage: float  # the highest token usage in the bucket
    running: int
    queued: int
    retractions: int


@dataclass(frozen=True, slots=True)
class Timeline:
    points: tuple[Point, ...] = ()
    first_ts: str | None = None
    last_ts: str | None = None
    span_s: float | None = None
    seconds_high: float = 0.0  # time with token usage ≥ HIGH_USAGE
    peak_usage: float | None = None
    retractions: int = 0

    @property
    def retractions_per_hour(self) -> float | None:
        if not self.span_s or self.span_s < 600 or not self.retractions:
            return None
        return self.retractions / (self.span_s / 3600)


def parse_ts(ts: str | None) -> datetime | None:
    if not ts or len(ts) < 19:
        return None
    try:
        return datetime.strptime(ts[:19], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


class TimelineBuilder:
    def __init__(self) -> None:
        self._points: list[Point] = []
        self._per_bucket = 1  # stats lines per bucket
        self._in_last = 0
        self._first: datetime | None = None
        self._first_ts: str | None = None
        self._last: datetime | None = None
        self._last_ts: str | None = None
        self._last_usage: float | None = None
        self._high = 0.0
        self._peak: float | None = None
        self._retractions = 0

    def stats(self, ts: str | None, usage: float | None, running: int, queued: int) -> None:
        when = parse_ts(ts)
        if when is not None:
            if self._first is None:
                self._first, self._first_ts = when, ts
            if self._last is not None and self._last_usage is not None:
                step = (when - self._last).total_seconds()
                if 0 < step <= MAX_STEP_S and self._last_usage >= HIGH_USAGE:
                    self._high += step
            self._last, self._last_ts = when, ts
        if usage is not None:
            self._last_usage = usage
            self._peak = usage if self._peak is None else max(self._peak, usage)
        point = Point(ts or "", usage or 0.0, running, queued, 0)
        if self._points and self._in_last < self._per_bucket:
            self._points[-1] = _merge(self._points[-1], point)
            self._in_last += 1
        else:
            self._points.append(point)
            self._in_last = 1
        if len(self._points) > MAX_POINTS:
            self._points = [
                _merge(a, b) for a, b in zip(self._points[::2], self._points[1::2], strict=False)
            ] + ([self._points[-1]] if len(self._points) % 2 else [])
            self._per_bucket *= 2
            self._in_last = self._per_bucket

    def retraction(self) -> None:
        self._retractions += 1
        if self._points:
            last = self._points[-1]
            self._points[-1] = replace(last, retractions=last.retractions + 1)

    def build(self) -> Timeline:
        span = (self._last - self._first).total_seconds() if self._first and self._last else None
        return Timeline(
            points=tuple(self._points),
            first_ts=self._first_ts,
            last_ts=self._last_ts,
            span_s=span,
            seconds_high=self._high,
            peak_usage=self._peak,
            retractions=self._retractions,
        )


def _merge(a: Point, b: Point) -> Point:
    return Point(
        start=a.start or b.start,
        usage=max(a.usage, b.usage),
        running=max(a.running, b.running),
        queued=max(a.queued, b.queued),
        retractions=a.retractions + b.retractions,
    )


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 60, top: float = 1.0) -> str:
    """Values in [0, top] as block characters, resampled to at most ``width`` characters."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [
            max(values[int(i * step) : int((i + 1) * step) or int(i * step) + 1])
            for i in range(width)
        ]
    out = []
    for v in values:
        level = min(max(v / top, 0.0), 1.0)
        out.append(SPARKS[min(int(level * len(SPARKS)), len(SPARKS) - 1)])
    return "".join(out)
