"""Where an allocation failed and in which phase, read from a traceback with the user's marks
(``site-marks.toml`` in a ``--rules`` directory; the built-in knowledge is the generated code
tables, read by judge/code_sites.py).

The most specific site wins: the table lists them in precedence order (a ViT forward runs inside
the model forward, and a graph capture runs a forward too, so encoder and capture frames outrank
the generic forward ones).
"""

from __future__ import annotations

from collections.abc import Sequence

from oomdoctor.knowledge import Knowledge, Marks, builtin
from oomdoctor.model import Frame


def _probe(frame: Frame) -> str:
    """``path:function``, with only the last dotted part of a qualified (IPython) name."""
    return f"{frame.path}:{frame.func.rsplit('.', 1)[-1]}"


def _frame_match(marks: Marks, frame: Frame, probe: str) -> bool:
    if any(mark in probe for mark in marks.frames):
        return True
    return bool(frame.code) and any(mark in frame.code for mark in marks.code)


def _text_match(marks: Marks, texts: Sequence[str]) -> bool:
    return any(mark in text for mark in marks.text for text in texts)


def classify(
    frames: Sequence[Frame],
    knowledge: Knowledge | None = None,
    texts: Sequence[str] = (),
    stages: Sequence[str] = (),
) -> tuple[str, Frame | None]:
    """The site of the most specific work a failure names (or ``unknown``), and its frame.

    ``texts`` are the failure line and the wrapper line that opened its traceback; ``stages`` the
    names of the pipeline stage the failure happened in (SGLang Omni, vLLM-Omni).
    """
    table = (knowledge or builtin()).sites
    probes = [_probe(f) for f in frames]
    for marks in table:
        for frame, probe in zip(frames, probes, strict=False):
            if _frame_match(marks, frame, probe):
                return marks.name, frame
        if _text_match(marks, texts):
            return marks.name, None
        if any(p.search(stage) for p in marks.stages for stage in stages if stage):
            return marks.name, None
    return "unknown", None


def phase_mark(
    frames: Sequence[Frame], knowledge: Knowledge | None = None, texts: Sequence[str] = ()
) -> tuple[str, Frame | None] | None:
    """``startup`` when any frame or text has a startup mark, else ``running`` for a serving
    loop's mark, with the frame that has it (None for a text); None when nothing is marked."""
    table = (knowledge or builtin()).phases
    probes = [_probe(f) for f in frames]
    for marks in table:
        for f, p in zip(frames, probes, strict=False):
            if _frame_match(marks, f, p):
                return marks.name, f
        if _text_match(marks, texts):
            return marks.name, None
    return None


def phase_of(
    frames: Sequence[Frame], knowledge: Knowledge | None = None, texts: Sequence[str] = ()
) -> str | None:
    """The phase name of phase_mark (None: the traceback does not say)."""
    mark = phase_mark(frames, knowledge, texts)
    return mark[0] if mark else None
