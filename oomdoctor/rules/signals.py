"""The signal a process died of, as a log says it: named with its number and what it means, so
that a verdict names a SIGSEGV or a SIGABRT instead of calling the death unknown."""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType

#: Signals a process dies of, by number: their names and what each usually means.
SIGNALS = MappingProxyType(
    {
        2: ("SIGINT", "an interrupt, Ctrl-C"),
        3: ("SIGQUIT", "how SGLang stops its processes after an error in one of them"),
        4: ("SIGILL", "an instruction this CPU does not have"),
        6: ("SIGABRT", "an abort: a failed check in native code"),
        7: ("SIGBUS", "a bus error: a bad memory mapping"),
        8: ("SIGFPE", "an arithmetic fault"),
        9: ("SIGKILL", "killed from outside"),
        11: ("SIGSEGV", "a segmentation fault: native code read memory it may not"),
        15: ("SIGTERM", "asked to stop"),
    }
)
_BY_NAME = MappingProxyType({name: n for n, (name, _) in SIGNALS.items()})
_BY_WORDS = MappingProxyType(
    {
        "Segmentation fault": 11,
        "Aborted": 6,
        "Bus error": 7,
        "Illegal instruction": 4,
        "Floating point exception": 8,
    }
)
#: Where a log says which signal ended a process (not where it lists signals that might have,
#: as Ray's "killed by SIGKILL by OOM killer ... or SIGSEGV" does).
_SAID = re.compile(
    r"Signal \d+ \((?P<name>SIG[A-Z]+)\) received|Signals\.(?P<enum>SIG[A-Z]+)"
    r"|exit ?code\s*:?\s*-(?P<code>\d{1,2})\b"
    r"|(?P<words>Segmentation fault|Aborted(?= \(core dumped\)|\s*$)|Bus error"
    r"|Illegal instruction|Floating point exception)"
)


def signal_of(texts: Iterable[str]) -> str | None:
    """``"SIGSEGV (signal 11, a segmentation fault: ...)"`` from the first of ``texts`` that says
    which signal ended a process; None when none does."""
    for text in texts:
        for m in _SAID.finditer(text):
            if m.group("code"):
                number = int(m.group("code"))
            elif m.group("words"):
                number = _BY_WORDS[m.group("words")]
            else:
                number = _BY_NAME.get(m.group("name") or m.group("enum"), 0)
            if number in SIGNALS:
                name, meaning = SIGNALS[number]
                return f"{name} (signal {number}, {meaning})"
    return None
