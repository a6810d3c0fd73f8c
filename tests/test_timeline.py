"""Memory over time in bounded memory: buckets merge, time at ≥95% usage, sparkline."""

from __future__ import annotations

from datetime import datetime, timedelta

from oomdoctor.incident.timeline import MAX_POINTS, TimelineBuilder, sparkline

T0 = datetime(2026, 1, 1, 0, 0, 0)


def _ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")


def test_buckets_stay_bounded_and_keep_the_peak() -> None:
    b = TimelineBuilder()
    for i in range(100_000):
        b.stats(_ts(i), 0.99 if i == 77_777 else 0.5, i % 50, 0)
    t = b.build()
    assert len(t.points) <= MAX_POINTS
    assert max(p.usage for p in t.points) == 0.99
    assert t.span_s == 99_999 and t.peak_usage == 0.99


def test_time_at_high_usage_ignores_idle_gaps() -> None:
    b = TimelineBuilder()
    for i in range(61):  # ten minutes at 0.97, one line every ten seconds
        b.stats(_ts(i * 10), 0.97, 8, 3)
    b.stats(_ts(3600 * 5), 0.97, 8, 3)  # five hours later: a gap, not time at 0.97
    assert b.build().seconds_high == 600


def test_retractions_per_hour_needs_a_span() -> None:
    b = TimelineBuilder()
    b.stats(_ts(0), 0.9, 1, 0)
    b.retraction()
    b.stats(_ts(30), 0.9, 1, 0)
    b.retraction()
    assert b.build().retractions_per_hour is None  # 30 s say nothing about an hour
    b.stats(_ts(7200), 0.9, 1, 0)
    assert b.build().retractions_per_hour == 1.0


def test_sparkline() -> None:
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert len(sparkline([i / 1000 for i in range(1000)], width=40)) == 40
    assert sparkline([]) == ""
