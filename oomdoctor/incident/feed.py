"""From scanned blocks to the assembler: number the candidate lines, extract their facts, and
hand over the block's stats summary. Shared by files, stdin, gzip, `watch` and `--follow`."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable

from oomdoctor.extract.facts import Extractor
from oomdoctor.incident.assemble import Assembler
from oomdoctor.model import Fact, Line
from oomdoctor.read.scan import BlockScan

FactsHook = Callable[[Line, list[Fact]], None]


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
        self.source = source
        self.lines = 0  # lines before the next block
        self._on_facts = on_facts

    def block(self, scan: BlockScan) -> None:
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
        numbered = ((self.lines + index + 1, raw) for index, raw in items)
        for line, facts in self.extractor.facts(self.source, numbered):
            self.assembler.feed(line, facts)
            if self._on_facts is not None:
                self._on_facts(line, facts)

    def blocks(self, scans: Iterable[BlockScan]) -> None:
        for scan in scans:
            self.block(scan)
