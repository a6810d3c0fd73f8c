"""Which pipeline stage printed a line (SGLang Omni, vLLM-Omni), from the line alone.

SGLang Omni's stage processes log as `stage_workers.<stage>` (its other modules under
`sglang_omni.<...>.<module>`); vLLM-Omni names its engine processes
`StageEngineCoreProc_stage<N>_replica<R>` and prefixes messages with `[Stage-<N>]`.
"""

from __future__ import annotations

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.model import Line

_LOGGER = LazyPattern(r"(?:^|\.)stage_workers\.(?P<stage>[\w-]+)$")
_ACTOR = LazyPattern(r"StageEngineCoreProc_(?P<stage>stage\d+)")
_PREFIX = LazyPattern(r"^\[Stage-(?P<stage>\d+)\]")


def line_stage(line: Line) -> str | None:
    """The stage named by the line's logger, process prefix or message prefix (or None)."""
    if line.logger:
        m = _LOGGER.search(line.logger)
        if m:
            return m.group("stage")
        if line.logger.startswith("sglang_omni"):
            return line.logger.rsplit(".", 1)[-1]
    if line.actor:
        m = _ACTOR.search(line.actor)
        if m:
            return m.group("stage")
    m = _PREFIX.match(line.text)
    return f"stage{m.group('stage')}" if m else None
