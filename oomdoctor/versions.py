"""Which SGLang release printed this log, bracketed by the formats it uses.

Reference wheels: 0.3.6, 0.4.6.post5, 0.4.10, 0.5.2, 0.5.10, 0.5.23 (sglang-logs.md §8). A marker
says "this format exists from version A to version B"; the guess is the intersection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from oomdoctor.model import Line, VersionGuess

KNOWN: tuple[str, ...] = ("0.3.6", "0.4.6", "0.4.10", "0.5.2", "0.5.10", "0.5.23")


def key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


# (regex on the normalised message, first version, last version); None = open-ended.
_MARKERS: tuple[tuple[re.Pattern[str], str | None, str | None], ...] = tuple(
    (re.compile(p), lo, hi)
    for p, lo, hi in (
        (r"^server_args=\{", "0.5.23", None),
        (r"^server_args=ServerArgs\(", None, "0.5.10"),
        (r"Init torch distributed ends\. mem usage=", "0.4.6", "0.5.2"),
        (r"Init torch distributed ends\. elapsed=", "0.5.10", "0.5.10"),
        (r"Init parallel begin|Memory baseline taken", "0.5.23", None),
        (r"Load weight end\. elapsed=", "0.5.10", None),
        (r"Load weight end\. type=.*mem usage=", "0.4.6", "0.5.2"),
        (r"Load weight end\. type=(?!.*mem usage=)", None, "0.3.6"),
        (r"KV Cache is allocated\. dtype:", "0.5.23", None),
        (r"KV Cache is allocated\. #tokens", "0.4.6", "0.5.10"),
        (r"Capture CUDA graph failed", "0.4.6", "0.4.6"),
        (r"Capture (?:target|draft) (?:decode|verify|prefill) CUDA graph", "0.5.23", None),
        (r"Capture cuda graph end\. Time elapsed", "0.4.6", "0.5.10"),
        (r"Capture cuda graph begin\. This can take up to several minutes\.$", None, "0.3.6"),
        (r"^(?:Prefill|Decode) batch(?: \[\d+\])?\. ", None, "0.5.2"),
        (r"^(?:Prefill|Decode) batch(?: \[\d+\])?, ", "0.5.10", None),
        (r"KV cache pool is full\. Retract requests\.", "0.4.10", None),
        (r"#new_tokens_gained", "0.5.10", None),
        (r"Decode out of memory happened", None, "0.4.6"),
        (r"SIGQUIT received\. signum=", "0.5.10", None),
        (r"Scheduler watchdog timeout", "0.5.10", None),
        (r"^Watchdog timeout \(self\.watchdog_timeout", None, "0.5.2"),
        (r"Loaded weights leave no GPU memory", "0.5.23", None),
        (r"Current value: (?:[\w.]+\.)?mem_fraction_static=", "0.5.3", None),
        (r"Avaliable tokens", None, "0.3.6"),
        (r"available_gpu_mem=", "0.4.10", None),
        (r"cuda-graph-max-bs-decode", "0.5.23", None),
        (r"TpModelWorkerClient hit an exception", "0.4.0", "0.5.2"),
        (r"pre_model_load_memory=", "0.5.10", None),
        (r"min_per_gpu_memory=", "0.4.6", "0.5.2"),
    )
)


class VersionTracker:
    """Collects markers while lines stream past; ``guess()`` intersects them."""

    def __init__(self) -> None:
        self._low: tuple[tuple[int, ...], str, Line] | None = None
        self._high: tuple[tuple[int, ...], str, Line] | None = None
        self.conflict = False

    def observe(self, line: Line) -> None:
        if line.rank and "DP-1" in line.rank:
            self._bound(line, None, "0.3.6")
        for pattern, lo, hi in _MARKERS:
            if pattern.search(line.text):
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
