"""From scanned blocks to the assembler: number the candidate lines, extract their facts, and
hand over the block's stats summary. Shared by files, stdin, gzip, `watch` and `--follow`.

Lines are numbered in reading order. Where the reader rewrote the input (extract/unwrap.py), a
block also gives each of its lines' physical number; the feeder keeps those of the lines it fed
(``physical``), for extract/renumber.py once the incident is assembled."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence

from oomdoctor.extract.facts import Extractor
from oomdoctor.extract.plan import Plan, detect
from oomdoctor.extract.shape import MIN_LINES
from oomdoctor.extract.unwrap import Unwrapper
from oomdoctor.incident.assemble import Assembler
from oomdoctor.model import Fact, Line
from oomdoctor.read.scan import BlockScan

FactsHook = Callable[[Line, list[Fact]], None]
#: Live input: the prefix is sought in at most this many candidate lines.
LIVE_SAMPLE = 200


def _inside(head: str) -> re.Pattern[str]:
    """A record head (``^...``) as found inside a line, not after a word character. Where it
    starts with a literal character, the pattern starts with it too (`\\((?<!\\w\\()...`
    rather than `(?<!\\w)\\(...`): Python's engine then skips to that character at C speed
    instead of trying the look-behind at every position."""
    body = head[1:]
    first = body[:2] if body[:1] == "\\" and not body[1:2].isalnum() else body[:1]
    after = body[len(first) : len(first) + 1]
    if first and (len(first) == 2 or first.isalnum()) and after not in ("*", "+", "?", "{"):
        return re.compile(first + r"(?<!\w" + first + ")" + body[len(first) :])
    return re.compile(r"(?<!\w)" + body)


class Feeder:
    """Feeds one source's blocks, in order, keeping the running line count."""

    def __init__(
        self,
        extractor: Extractor,
        assembler: Assembler,
        source: int = 0,
        on_facts: FactsHook | None = None,
    ) -> None:
        self.extractor = extractor
        self.assembler = assembler
        extractor.folder.kept = assembler.unfoldable()  # what may be folded (extract/fold.py)
        self.source = source
        self.lines = 0  # lines before the next block
        self._on_facts = on_facts
        #: (source, line number in reading order) → the physical line, where they differ
        self.physical: dict[tuple[int, int], int] = {}
        #: the wrapper's learned prefix and record head (extract/plan.py), if any
        self.prefix: re.Pattern[str] | None = None
        self.head: re.Pattern[str] | None = None
        self._numbers: Sequence[int] | None = None
        #: live input (`watch`, `--follow`, a file's head) is fed block by block with no plan:
        #: the prefix is learned from the candidate lines seen so far (None: a plan was given)
        self._sample: list[str] | None = []

    def block(self, scan: BlockScan, numbers: Sequence[int] | None = None) -> None:
        """One scanned block; ``numbers``: the physical line of each of its lines."""
        self._numbers = numbers
        if self._sample is not None:
            self._learn(scan)
        items = dict(scan.candidates)
        if scan.stats is not None:
            for last in (scan.stats.last_prefill, scan.stats.last_decode):
                if last is not None:
                    items.setdefault(*last)
        ordered = sorted(items.items())
        done = 0
        for counted in scan.retractions:  # a run's other retraction lines, counted by the scanner
            upto = bisect_right(ordered, counted.after, key=lambda item: item[0])
            self._feed(ordered[done:upto])
            self.assembler.add_retractions(counted.lines, counted.requests)
            done = upto
        self._feed(ordered[done:])
        if scan.stats is not None:
            self.assembler.add_stats(scan.stats)
        self.lines += scan.newlines

    def _feed(self, items: list[tuple[int, bytes]]) -> None:
        numbers = self._numbers
        if numbers is not None:
            for index, _ in items:
                if index < len(numbers):
                    self.physical[(self.source, self.lines + index + 1)] = numbers[index]
        numbered = ((self.lines + index + 1, raw) for index, raw in items)
        facts_of = self.extractor.facts(self.source, numbered, self.prefix, self.head)
        for line, facts in facts_of:
            self.assembler.feed(line, facts)
            if self._on_facts is not None:
                self._on_facts(line, facts)
        folded = self.extractor.take_folded()
        if folded is not None:
            self.assembler.add_folded(folded)

    def blocks(self, scans: Iterable[BlockScan]) -> None:
        for scan in scans:
            self.block(scan)

    def _learn(self, scan: BlockScan) -> None:
        """Fed without a plan: learn the prefix from the first candidate lines (they carry it
        as every line does), until one is found or LIVE_SAMPLE lines were seen."""
        sample = self._sample
        assert sample is not None
        before = len(sample)
        sample += [raw.decode("utf-8", "replace") for _, raw in scan.candidates]
        if len(sample) < MIN_LINES or (before >= MIN_LINES and len(sample) < before * 5 // 4):
            return  # too few yet, or too few new ones to learn anything else
        plan = detect(sample, self.extractor.scanner.anchors)
        if plan.prefix is not None or plan.head is not None or len(sample) >= LIVE_SAMPLE:
            self.use(plan)

    def use(self, plan: Plan) -> None:
        """Strip the plan's learned prefix from each line, split lines at its record head."""
        self._sample = None
        self.prefix = plan.prefix.compiled() if plan.prefix is not None else None
        # found inside a line: from a word's start, not from the middle of one
        self.head = _inside(plan.head.regex) if plan.head else None

    def unwrapped(self, source: Unwrapper) -> None:
        """Scan and feed the blocks of an input with its wrapper taken off."""
        scan = self.extractor.scanner.scan
        for n, block in enumerate(source):
            if n == 0:
                self.use(source.plan)
            self.block(scan(block.data), block.numbers)
