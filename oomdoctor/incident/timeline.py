"""Memory over time from the periodic stats lines, in bounded memory.

Points are kept in at most MAX_POINTS buckets; when they fill up, neighbours merge (each bucket
then covers twice the time), so any log length gives the same small summary.
"""

from __future__ import annotations

from datetime import datetime

from oomdoctor.model import Point, Timeline

MAX_POINTS = 240
#: A gap longer than this between stats lines is idle time, not time at high usage.
MAX_STEP_S = 600.0
HIGH_USAGE = 0.95


#: A rate over less time than this says little (two retractions a minute apart are not 120/hour).
MIN_RATE_SPAN_S = 600.0


def rate_per_hour(count: int, first_ts: str | None, last_ts: str | None) -> float | None:
    """``count`` events between two timestamps, per hour (None over less than MIN_RATE_SPAN_S)."""
    if count < 2:
        return None
    a, b = parse_ts(first_ts), parse_ts(last_ts)
    if a is None or b is None or (b - a).total_seconds() < MIN_RATE_SPAN_S:
        return None
    return count / ((b - a).total_seconds() / 3600)


def parse_ts(ts: str | None) -> datetime | None:
    """A log timestamp (``2025-01-02 03:04:05``, optional ``T``/fraction/``Z``), or None."""
    if not ts or len(ts) < 19 or ts[10] not in " T":
        return None
    digits = ""
    if ts[19:20] in (".", ","):
        for char in ts[20:26]:
            if not char.isdigit():
                break
            digits += char
    try:
        stamp = datetime.fromisoformat(f"{ts[:10]}T{ts[11:19]}")
    except ValueError:
        return None
    return stamp.replace(microsecond=int(digits.ljust(6, "0"))) if digits else stamp


class TimelineBuilder:
    """Takes one summary per block of stats lines (see scan.StatsBlock), in log order."""

    def __init__(self) -> None:
        self._points: list[Point] = []
        self._per_bucket = 1  # blocks per bucket
        self._in_last = 0
        self._first: datetime | None = None
        self._first_ts: str | None = None
        self._last: datetime | None = None
        self._last_ts: str | None = None
        self._last_high = False
        self._high = 0.0
        self._peak: float | None = None
        self._retractions = 0

    def add_block(
        self,
        first_ts: str | None,
        last_ts: str | None,
        peak: float | None,
        high_lines: int,
        usage_lines: int,
        running: int = 0,
        queued: int = 0,
    ) -> None:
        """A block's stats lines: time span, highest usage, how many at ≥ HIGH_USAGE."""
        first, last = parse_ts(first_ts), parse_ts(last_ts)
        share = high_lines / usage_lines if usage_lines else 0.0
        if first is not None:
            if self._first is None:
                self._first, self._first_ts = first, first_ts
            if self._last is not None and self._last_high:
                gap = (first - self._last).total_seconds()
                if 0 < gap <= MAX_STEP_S:
                    self._high += gap  # the stretch between blocks, while usage stayed high
            if last is not None and last >= first:
                self._high += (last - first).total_seconds() * share
        if last is not None:
            self._last, self._last_ts = last, last_ts
        self._last_high = share >= 0.5
        if peak is not None:
            self._peak = peak if self._peak is None else max(self._peak, peak)
        point = Point(first_ts or "", peak or 0.0, running, queued, 0)
        if self._points and self._in_last < self._per_bucket:
            self._points[-1] = _merge(self._points[-1], point)
            self._in_last += 1
        else:
            self._points.append(point)
            self._in_last = 1
        if len(self._points) > MAX_POINTS:
            pairs = zip(self._points[::2], self._points[1::2], strict=False)
            odd = [self._points[-1]] if len(self._points) % 2 else []
            self._points = [_merge(x, y) for x, y in pairs] + odd
            self._per_bucket *= 2
            self._in_last = self._per_bucket

    def stats(self, ts: str | None, usage: float | None, running: int, queued: int) -> None:
        """One stats line on its own (a block of one)."""
        high = 1 if usage is not None and usage >= HIGH_USAGE else 0
        self.add_block(ts, ts, usage, high, 1 if usage is not None else 0, running, queued)

    def retraction(self, count: int = 1) -> None:
        self._retractions += count
        if self._points:
            last = self._points[-1]
            self._points[-1] = last._replace(retractions=last.retractions + count)

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
