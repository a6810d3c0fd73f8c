"""Newest-first exports (a log platform's download, `journalctl -r`), told by the lines' own
timestamps: in a sample whose timestamps mostly go back in time, the lines are in reverse.

A log whose time goes back once (a restart, an NTP step, a clock that wraps at the minute in a
synthetic export) is not reversed: the steps back must outnumber the steps forward many times.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomdoctor.extract.lazy import LazyPattern

#: The first timestamp in a line's head: a date and time (ISO, with or without the year), a
#: syslog date, or a time alone; the groups give a key that sorts like the time.
_STAMP = LazyPattern(
    r"(?:(?P<y>\d{4})-)?(?P<mo>\d{2})-(?P<d>\d{2})[T ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<f>\d+))?"
    r"|(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<sd>\d{1,2}) "
    r"(?P<sh>\d{2}):(?P<smi>\d{2}):(?P<ss>\d{2})"
    r"|(?<![\d:.])(?P<th>\d{2}):(?P<tmi>\d{2}):(?P<ts>\d{2})(?:[.,](?P<tf>\d+))?"
)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: Where the timestamp must start to count (an envelope's, not a number in the message).
HEAD = 64
#: Steps back must outnumber steps forward this many times, and be at least MIN_STEPS (two
#: will do when no step goes forward).
RATIO = 4
MIN_STEPS = 3


def stamp(line: str) -> tuple[int | str, ...] | None:
    """A sortable key for the line's first timestamp (its form first: keys of different forms
    are not compared), or None."""
    m = _STAMP.search(line, 0, HEAD + 32)
    if m is None or m.start() > HEAD:
        return None
    g = m.groupdict()
    if g["mo"] is not None:
        frac = (g["f"] or "").ljust(9, "0")[:9]
        return ("iso" if g["y"] else "md", int(g["y"] or 0), int(g["mo"]), int(g["d"]),
                int(g["h"]), int(g["mi"]), int(g["s"]), int(frac))  # fmt: skip
    if g["mon"] is not None:
        return ("syslog", _MONTHS.index(g["mon"]), int(g["sd"]), int(g["sh"]), int(g["smi"]),
                int(g["ss"]))  # fmt: skip
    frac = (g["tf"] or "").ljust(9, "0")[:9]
    return ("time", int(g["th"]), int(g["tmi"]), int(g["ts"]), int(frac))


def newest_first(lines: Sequence[str]) -> bool:
    """Whether the sample's timestamps mostly go back in time."""
    back = forward = 0
    last: tuple[int | str, ...] | None = None
    for line in lines:
        key = stamp(line)
        if key is None:
            continue
        if last is not None and key[0] == last[0]:
            if key < last:
                back += 1
            elif key > last:
                forward += 1
        last = key
    if forward == 0:
        return back >= 2
    return back >= MIN_STEPS and back >= RATIO * forward
