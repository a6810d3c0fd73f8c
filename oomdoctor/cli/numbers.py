"""Option types for numbers that must be finite and of a size a server could use.

click's FloatRange lets ``nan`` through (every comparison with NaN is false) and IntRange has no
upper bound of its own, so ``--mem-fraction-static nan`` and ``--chunked-prefill-size 1e23``
reached the budget arithmetic. These types refuse them as bad options (exit 2), with the range.
"""

from __future__ import annotations

import math
from typing import Any

import click

#: No server takes more tokens than this in one request, one chunk or one pool.
MAX_TOKENS = 1 << 32
#: No CUDA graph, or count of running requests, is larger.
MAX_BATCH = 1 << 20
#: No model's KV cache takes more bytes per token on one GPU.
MAX_BYTES_PER_TOKEN = 1 << 32


class Count(click.IntRange):
    """A whole number from ``low`` to ``high``; scientific notation (``1e5``) is read when it names
    a whole number, and one beyond the range is refused with the range."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            text = value.strip()
            try:
                number = float(text)
            except ValueError:
                number = None
            if number is not None and not text.lstrip("+-").isdigit():
                if not math.isfinite(number) or number != int(number):
                    self.fail(f"{value!r} is not a whole number", param, ctx)
                if abs(number) > 2**63:
                    self.fail(f"{value!r} is out of range ({self._describe_range()})", param, ctx)
                value = int(number)
        return super().convert(value, param, ctx)


class Finite(click.FloatRange):
    """A float range that refuses ``nan`` and the infinities."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number ({self._describe_range()})", param, ctx)
        return number
