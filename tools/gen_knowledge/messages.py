"""Table d: the memory-check messages a release raises or logs, with the function that emits them.

A message is the literal text of a ``raise``, ``logger.*``, ``warnings.warn`` or ``assert``
(f-string constant parts and ``%``/``{}`` templates split at their placeholders; a message
assembled in a local variable first is followed), kept when its words match the seeds' pattern;
backticks and runs of white space are dropped (``oomdoctor.knowledge.code.message_role`` drops
them from the log line as well).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tools.gen_knowledge.release import Release


def messages(
    release: Release, pattern: re.Pattern[str], min_fragment: int
) -> Iterator[tuple[tuple[str, ...], str, str, str]]:
    """(fragments, how, module path, qualname) of each memory message."""
    for info in release.files.values():
        for qual, func in info.functions.items():
            for how, _line, parts in func.messages:
                text = " ".join(parts)
                if not pattern.search(text):
                    continue
                if max((len(p) for p in parts), default=0) < min_fragment:
                    continue
                yield tuple(_tidy(p) for p in parts), how, info.path, qual


def _tidy(fragment: str) -> str:
    """One line of text (a message joined from several literals keeps their spaces), without
    the backticks that quote flag names (```max_num_seqs```): a paste rendered as Markdown (an
    issue, a chat) loses them, and the lookup drops them from the log line too."""
    return re.sub(r"\s+", " ", fragment.replace("`", "")).strip()
