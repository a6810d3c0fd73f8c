"""Which SGLang release printed this log, bracketed by the formats it uses.

Reference wheels: 0.3.6, 0.4.6.post5, 0.4.10, 0.5.2, 0.5.10, 0.5.23 (sglang-logs.md §8). A marker
says "this format exists from version A to version B"; the guess is the intersection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from oomdoctor.model import Line, VersionGuess

KNOWN: tuple[str, ...] = ("0.3.6", "0.4.6", "0.4.10", "0.5.2", "0.5.10", "0.5.23")


def key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


# (a literal every match contains, the regex on the normalised message, first version, last
# version); None = open-ended. The regex is compiled the first time its literal is seen: most
# markers never appear in a given log, and a short log should not pay for thirty regexes.
_MARKERS: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("server_args={", r"^server_args=\{", "0.5.23", None),
    ("server_args=ServerArgs(", r"^server_args=ServerArgs\(", None, "0.5.10"),
    (
        "Init torch distributed ends. mem usage=",
        r"Init torch distributed ends\. mem usage=",
        "0.4.6",
        "0.5.2",
    ),
    (
        "Init torch distributed ends. elapsed=",
        r"Init torch distributed ends\. elapsed=",
        "0.5.10",
        "0.5.10",
    ),
    ("Init parallel begin", r"Init parallel begin", "0.5.23", None),
    ("Memory baseline taken", r"Memory baseline taken", "0.5.23", None),
    ("Load weight end. elapsed=", r"Load weight end\. elapsed=", "0.5.10", None),
    ("Load weight end. type=", r"Load weight end\. type=.*mem usage=", "0.4.6", "0.5.2"),
    ("Load weight end. type=", r"Load weight end\. type=(?!.*mem usage=)", None, "0.3.6"),
    ("KV Cache is allocated. dtype:", r"KV Cache is allocated\. dtype:", "0.5.23", None),
    ("KV Cache is allocated. #tokens", r"KV Cache is allocated\. #tokens", "0.4.6", "0.5.10"),
    ("Capture CUDA graph failed", r"Capture CUDA graph failed", "0.4.6", "0.4.6"),
    (
        " CUDA graph",
        r"Capture (?:target|draft) (?:decode|verify|prefill) CUDA graph",
        "0.5.23",
        None,
    ),
    (
        "Capture cuda graph end. Time elapsed",
        r"Capture cuda graph end\. Time elapsed",
        "0.4.6",
        "0.5.10",
    ),
    (
        "This can take up to several minutes.",
        r"Capture cuda graph begin\. This can take up to several minutes\.$",
        None,
        "0.3.6",
    ),
    (" batch", r"^(?:Prefill|Decode) batch(?: \[\d+\])?\. ", None, "0.5.2"),
    (" batch", r"^(?:Prefill|Decode) batch(?: \[\d+\])?, ", "0.5.10", None),
    (
        "KV cache pool is full. Retract requests.",
        r"KV cache pool is full\. Retract requests\.",
        "0.4.10",
        None,
    ),
    ("#new_tokens_gained", r"#new_tokens_gained", "0.5.10", None),
    ("Decode out of memory happened", r"Decode out of memory happened", None, "0.4.6"),
    ("SIGQUIT received. signum=", r"SIGQUIT received\. signum=", "0.5.10", None),
    ("Scheduler watchdog timeout", r"Scheduler watchdog timeout", "0.5.10", None),
    (
        "Watchdog timeout (self.watchdog_timeout",
        r"^Watchdog timeout \(self\.watchdog_timeout",
        None,
        "0.5.2",
    ),
    ("Loaded weights leave no GPU memory", r"Loaded weights leave no GPU memory", "0.5.23", None),
    ("mem_fraction_static=", r"Current value: (?:[\w.]+\.)?mem_fraction_static=", "0.5.3", None),
    ("Avaliable tokens", r"Avaliable tokens", None, "0.3.6"),
    ("available_gpu_mem=", r"available_gpu_mem=", "0.4.10", None),
    ("cuda-graph-max-bs-decode", r"cuda-graph-max-bs-decode", "0.5.23", None),
    (
        "TpModelWorkerClient hit an exception",
        r"TpModelWorkerClient hit an exception",
        "0.4.0",
        "0.5.2",
    ),
    ("pre_model_load_memory=", r"pre_model_load_memory=", "0.5.10", None),
    ("min_per_gpu_memory=", r"min_per_gpu_memory=", "0.4.6", "0.5.2"),
)


@cache
def _compiled(source: str) -> re.Pattern[str]:
    return re.compile(source)


class VersionTracker:
    """Collects markers while lines stream past; ``guess()`` intersects them."""

    def __init__(self) -> None:
        self._low: tuple[tuple[int, ...], str, Line] | None = None
        self._high: tuple[tuple[int, ...], str, Line] | None = None
        self.conflict = False

    def observe(self, line: Line) -> None:
        if line.rank and "DP-1" in line.rank:
            self._bound(line, None, "0.3.6")
        text = line.text
        for literal, source, lo, hi in _MARKERS:
            if literal in text and _compiled(source).search(text):
                self._bound(line, lo, hi)

    def observe_all(self, lines: Iterable[Line]) -> None:
        for line in lines:
            self.observe(line)

    def _bound(self, line: Line, lo: str | None, hi: str | None) -> None:
        if lo is not None and (self._low is None or key(lo) > self._low[0]):
            self._low = (key(lo), lo, line)
        if hi is not None and (self._high is None or key(hi) < self._high[0]):
            self._high = (key(hi), hi, line)
        if self._low and self._high and self._low[0] > self._high[0]:
            self.conflict = True

    def guess(self) -> VersionGuess:
        low = self._low[1] if self._low else None
        high = self._high[1] if self._high else None
        evidence = tuple(b[2] for b in (self._low, self._high) if b)
        if self.conflict:  # formats of several releases: say nothing rather than something wrong
            return VersionGuess(None, None, evidence)
        return VersionGuess(low, high, evidence)


def at_least(guess: VersionGuess, version: str) -> bool:
    """True only when every release the log could come from is ``version`` or newer."""
    return guess.low is not None and key(guess.low) >= key(version)


def at_most(guess: VersionGuess, version: str) -> bool:
    return guess.high is not None and key(guess.high) <= key(version)
