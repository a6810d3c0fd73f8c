"""The --mem-fraction-static in effect, and where the log says so.

SGLang prints the flag in server_args, but the value it sizes the pool with can differ: a stage's
own line (Omni), a multimodal adjustment (0.3.6 ×0.95, 0.4.6 ×0.90), AMD aiter (×0.85), or none
printed at all; then the KV line says what it was (y = 1 − (post − KV)/pre).
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.model import Incident, RankMemory


class Fraction(NamedTuple):
    value: float
    source: str
    #: SGLang multiplies whatever --mem-fraction-static says by this (0.3.6/0.4.6 multimodal,
    #: AMD aiter): a value to pass is the wanted y divided by it.
    factor: float = 1.0
    factor_why: str | None = None


def fraction(incident: Incident, ranks: tuple[RankMemory, ...] | None = None) -> Fraction | None:
    """The --mem-fraction-static that was in effect, and where that value came from.

    ``ranks`` are the checkpoints of the budget being built (one pipeline stage's, SGLang Omni):
    a stage's own startup line says its own fraction, whatever the other stages use."""
    ranks = incident.ranks if ranks is None else ranks
    staged = [r for r in ranks if r.stage and r.fraction and 0 < r.fraction <= 1]
    if staged:
        r = staged[0]
        return Fraction(float(r.fraction or 0), f"the {r.stage} stage's startup line")
    args = incident.server_args
    y = args.get("mem_fraction_static")
    found: Fraction | None = None
    if isinstance(y, int | float) and not isinstance(y, bool) and 0 < y <= 1:
        found = Fraction(float(y), "server_args")
    else:
        for failure in incident.failures:
            fy = failure.data.get("y")
            if isinstance(fy, float) and 0 < fy <= 1:
                found = Fraction(fy, "the error message")
                break
    if found is None:  # a launch command echoed into the log (`+ exec ... --mem-fraction-static`)
        flags = [f for f in incident.facts_of("launch_flag") if 0 < (f.num("y") or 0) <= 1]
        # Several Omni stages: the thinker's own flag, else the one that applies to every stage.
        preferred = [f for f in flags if f.text("stage") in ("thinker", None)]
        chosen = flags[0] if len(flags) == 1 else (preferred[0] if preferred else None)
        if chosen is not None:
            found = Fraction(float(chosen.num("y") or 0), "the launch command")
    if found is None:
        for fact in incident.facts_of("omni_stage"):
            fy = fact.num("mem_fraction_static")
            if fy is not None and 0 < fy <= 1:
                found = Fraction(fy, "the Omni stage line")
    for fact in incident.facts_of("mm_fraction_adjust"):
        to = fact.num("to") or fact.num("to2")
        if to is not None and not (found is not None and abs(found.value - to) < 0.0006):
            # 0.4.10 prints server_args after the adjustment, unrounded: keep that when it agrees.
            # 0.4.6 ("reduce ... to X") multiplies even a value the user passed by 0.90.
            if fact.num("to") is not None and found is not None and found.source == "server_args":
                factor = round(to / found.value, 2)
                found = Fraction(to, "the multimodal adjustment line", factor, "0.4.6 multimodal")
            else:
                found = Fraction(to, "the multimodal adjustment line")
        elif found is not None and "adjust --mem-fraction-static for multimodal" in fact.line.text:
            found = Fraction(
                round(found.value * 0.95, 4),
                "server_args × 0.95 (0.3.6 multimodal)",
                0.95,
                "0.3.6 multimodal",
            )
    if found is not None and found.source == "server_args":
        found = _silent_factor(incident, found, ranks) or found
    if found is None:
        found = _from_kv_line(incident, ranks)
    return found


def y_used(incident: Incident, ranks: tuple[RankMemory, ...]) -> float | None:
    """y in effect = 1 − (post − KV logged)/pre, from the first rank that printed all three."""
    for r in ranks:
        if r.pre is None or r.post is None or r.kv_logged is None or r.pre.value <= 0:
            continue
        return 1.0 - (r.post.value - r.kv_logged.value - mm_reserve(incident)) / r.pre.value
    return None


def _from_kv_line(incident: Incident, ranks: tuple[RankMemory, ...]) -> Fraction | None:
    """No line prints y: the rank that printed pre, post and its KV pool says what y was."""
    y = y_used(incident, ranks)
    if y is not None and 0 < y < 1:
        return Fraction(round(y, 3), "derived from the KV line: 1 − (post − KV)/pre")
    return None


#: Factors SGLang applies after printing server_args (reference §2.1): multimodal models ×0.95
#: (0.3.6) and ×0.90 (0.4.6), AMD aiter with long contexts ×0.85 (0.4.10–0.5.2).
_SILENT_FACTORS = ((0.90, "0.4.6 multimodal"), (0.95, "0.3.6 multimodal"), (0.85, "AMD aiter"))


def _silent_factor(
    incident: Incident, printed: Fraction, ranks: tuple[RankMemory, ...]
) -> Fraction | None:
    """The fraction really used when the KV line only fits a known post-print factor.

    When the y the KV line implies equals printed × factor (to within the rounding of the printed
    GB), SGLang applied the factor even though no line said so (an excerpt that starts after the
    adjustment line, or a silent one).
    """
    used = y_used(incident, ranks)
    if used is None or abs(used - printed.value) < 0.004:
        return None  # no KV line, or the printed value is the one used
    for factor, why in _SILENT_FACTORS:
        if abs(used - printed.value * factor) < 0.004:
            return Fraction(
                round(printed.value * factor, 4),
                f"server_args × {factor} ({why}; the KV line fits only this value)",
                factor,
                why,
            )
    return None


def mm_reserve(incident: Incident) -> float:
    """0.5.23: GB of the KV budget set aside for multimodal allocations made after sizing."""
    return max((f.num("gb") or 0.0 for f in incident.facts_of("mm_kv_reserve")), default=0.0)
