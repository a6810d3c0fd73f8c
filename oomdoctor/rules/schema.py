"""What a rule file holds: the records a loaded rule is made of, and the keys a file may use.

rules/loader.py reads and validates the files; README.md (Writing a rule) documents them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from oomdoctor.model import Line, Scalar
from oomdoctor.rules.clock import PATTERN_TIMEOUT, USER_BUDGET

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - exercised on 3.10 only
    pass

#: The advice kinds a rule's `advice` key can name, defined here once: the loader validates
#: against them, advice/registry.py maps each to its generators per engine, `oomdoctor rules
#: advice` prints them, and a test checks the README lists exactly these.
ADVICE_KINDS: Mapping[str, str] = MappingProxyType(
    {
        "raise_mem_fraction": "raise the engine's fraction (SGLang's y, vLLM's u) to the value that "
        "gives a KV pool, inside the workable window",
        "weights_do_not_fit": "the weights alone do not fit the memory: more GPUs, quantisation, "
        "a smaller model",
        "static_footprint": "what startup loads before the KV pool does not fit: fewer weights per "
        "GPU, and the line that tells whether the pool itself was being built",
        "lower_mem_fraction": "lower the fraction by the measured shortfall, and the batch levers "
        "(chunked prefill, running requests, graph batch size)",
        "graph_capture": "make room for CUDA-graph capture (graph batch size, fraction) or skip it",
        "free_gpu": "free or size around the other processes that hold the GPU",
        "reserve_encoder": "leave room for a multimodal encoder: reserve, lower fraction, "
        "smaller inputs",
        "kv_slots": "the KV pool ran out of slots, not of memory: pool size and request limits",
        "retraction": "requests are retracted (or preempted) for KV space: grow the pool or admit less",
        "host_memory": "host (CPU) memory ran out, not GPU memory",
        "gpu_fault": "a GPU fault that is not exhaustion (illegal access, no kernel image, driver)",
        "thinker_kv": "SGLang Omni's thinker stage got no KV pool: its own fraction or budget",
        "omni_placement": "SGLang Omni's stages do not fit their GPU: move or shrink a stage",
        "remedy": "the winning rule's own remedy text, as written in its [docs]",
        "oversized": "one allocation larger than the card: no fraction fits it; shrink the request",
        "none": "no action (the rule only explains)",
    }
)
OPS = ("eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "matches")
TOP_KEYS = frozenset(
    {
        "id",
        "category",
        "priority",
        "confidence",
        "title",
        "advice",
        "refines",
        "docs",
        "when",
        "patterns",
        "fixtures",
        "doubt",
    }
)
DOC_KEYS = frozenset({"what", "why", "remedy", "false_positives", "references", "question"})
DOUBT_KEYS = frozenset({"all", "any", "none", "confidence", "alternative", "question"})
ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
#: Seconds all user patterns may spend in one run (every pattern on every line, the user's
#: actor regexes included) before they are all turned off with a notice (rules/clock.py).
PATTERN_BUDGET = USER_BUDGET


class Condition(NamedTuple):
    key: str
    op: str  # "truthy" or one of OPS
    operand: Any = None


class RulePattern(NamedTuple):
    """A rule's own line pattern; it becomes the feature ``pattern.<rule id>.<name>``."""

    rule: str
    name: str
    anchor: str
    regex: Any  # regex.Pattern[str]
    where: str = ""  # file:line of its [[patterns]] entry, for notices

    @property
    def kind(self) -> str:
        return f"pattern:{self.rule}.{self.name}"

    @property
    def anchors(self) -> tuple[str, ...]:
        return (self.anchor,)

    def match(self, text: str) -> Mapping[str, Scalar] | None:
        return self.match_within(text, PATTERN_TIMEOUT)

    def match_within(self, text: str, timeout: float) -> Mapping[str, Scalar] | None:
        """``match`` with at most ``timeout`` seconds (TimeoutError past it)."""
        m = self.regex.search(text, timeout=timeout)
        if m is None:
            return None
        return {k: v for k, v in m.groupdict().items() if v is not None}


class FixtureRef(NamedTuple):
    """A log a rule is tested on, with the GPU snapshot files that go with it (if any) and, for
    a log it must fire on, the line numbers that must be among its evidence."""

    log: Path
    snapshots: tuple[Path, ...] = ()
    evidence: tuple[int, ...] = ()

    def __str__(self) -> str:
        return str(self.log) + "".join(f" + {s.name}" for s in self.snapshots)


class Doubt(NamedTuple):
    """When the evidence a rule fired on is weaker than its confidence says: the confidence to
    give instead, the category the log cannot rule out, and the one question (or command) that
    would settle it. A rule's doubts are tried in file order; the first that holds applies."""

    all: tuple[Condition, ...]
    any: tuple[Condition, ...]
    none: tuple[Condition, ...]
    confidence: float
    alternative: str
    question: str


class Rule(NamedTuple):
    id: str
    category: str
    priority: int
    confidence: float
    title: str
    advice: str
    refines: tuple[
        str, ...
    ]  # rules this one is a more specific case of (no ambiguity between them)
    what: str
    why: str
    remedy: str
    false_positives: tuple[str, ...]
    references: tuple[str, ...]
    all: tuple[Condition, ...]
    any: tuple[Condition, ...]
    none: tuple[Condition, ...]
    patterns: tuple[RulePattern, ...]
    fire: tuple[FixtureRef, ...]
    silent: tuple[FixtureRef, ...]
    path: Path
    doubts: tuple[Doubt, ...] = ()
    #: what would tell this rule's case from a rival's (shown when the verdict is uncertain)
    question: str = ""
    #: from a --rules directory, not shipped: its verdicts say so in every report format
    user: bool = False


class RuleError(Exception):
    """One or more rule files are invalid; ``problems`` are ``file:line: message`` strings."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


def builtin_dir() -> Path:
    """The shipped rules: inside the wheel, or at the top of a source checkout."""
    package = Path(__file__).resolve().parent.parent  # oomdoctor/
    packaged = package / "_data" / "rules"
    return packaged if packaged.is_dir() else package.parent / "rules"


class Evidence(NamedTuple):
    line: Line
    note: str | None = None


class Finding(NamedTuple):
    """A rule that fired, with the lines that made it fire."""

    rule: Rule
    evidence: tuple[Evidence, ...]
