"""Find the few lines worth parsing in blocks of a log, at close to grep's speed.

A production log is mostly boring lines: the periodic `Prefill/Decode batch` stats, uvicorn
access lines, blank lines. One regex match passes over each run of them at C speed (whatever
their mix); only the lines it stops at reach Python, where each is checked exactly as a line of
its own and tested against the anchors of every signature and rule. The stats lines are
not parsed one by one: each block is summarised with a few C-level searches (how many, the
highest token usage, how many at ≥ 0.95, the first and last timestamps, the last line of each
kind). Retraction lines, the frequent evidence of a full pool, are counted in the middle of
each run of them. The caller gets the candidate lines and that summary; line numbers stay exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

#: Sub-blocks of this size whose lines are all stats or access lines are skipped on counts alone.
SUB_BLOCK = 1 << 16
#: Below these the anchors are tested with substring checks instead of a compiled alternation.
SMALL_INPUT = 256 << 10
SMALL_LINES = 5000
#: After this many sub-blocks in a row that held lines to test, only every DENSE_STREAK-th one is
#: checked for being boring as a whole (the check costs a pass, and on a dense log never pays).
DENSE_STREAK = 8
STATS_HEADS = (b"Prefill batch", b"Decode batch")
#: uvicorn access lines (`"POST /generate HTTP/1.1" 200`): frequent, never evidence.
ACCESS = b" HTTP/1."
_USAGE = re.compile(rb"token usage: (\d\.\d\d)")
_TS = re.compile(rb"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
HIGH_USAGE = b"0.95"
#: SGLang's retraction line in full (0.4.10 to 0.5.23): the frequent evidence kind of a full
#: pool (1-2% of a dense log's lines). Of each run of such lines with no other candidate between
#: them, the first RETRACTIONS_KEPT and the last one are passed (what features and evidence
#: read); the others are counted (Counted).
RETRACTION = re.compile(
    rb"(?:\[[^\]\n]{0,80}\] )?KV cache pool is full\. Retract requests\. #retracted_reqs: (\d{1,9}), "
    rb"(?:#new_tokens_gained: \d+, )?(?:#mamba_num_gained: \d+, )?"
    rb"#new_token_ratio: [\d.]+ -> [\d.]+\r?"
)
RETRACTIONS_KEPT = 3
RETRACTION_SAMPLE = (
    b"KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 1, "
    b"#new_token_ratio: 0.1 -> 0.2"
)
#: The anchors a retraction line may hold for it to be counted: the signature's, and the engine
#: marker that votes SGLang (the kept lines still vote; the count of votes is not evidence).
RETRACTION_ANCHORS = frozenset({b"Retract requests", b"Retract requests. #retracted_reqs"})
#: Lines the skipping regex may pass over (each must be a line the exact checks skip too):
#: blank; a stats or access line, bare or in SGLang's `[time rank] ` envelope.
_ENVELOPE = rb"(?:\[[^\]\n]{0,80}\] )?"
BLANK_LINE = rb"[ \t\r]*\n"
STATS_HEAD = rb"Prefill batch|Decode batch"
ACCESS_HEAD = rb"INFO: [^\n]* HTTP/1\."
#: Samples of the boring lines: a rule anchor found in one of them disables the exclusion.
_BORING_SAMPLES = (
    "Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.50, "
    "#running-req: 8, #queue-req: 2, cuda graph: False, input throughput (token/s): 1000.00",
    "Decode batch. #running-req: 8, #token: 1000, token usage: 0.50, cuda graph: True, "
    "gen throughput (token/s): 100.00, #queue-req: 0",
    'INFO:     127.0.0.1:45678 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    'INFO:     10.0.0.2:5000 - "GET /health HTTP/1.1" 503 Service Unavailable',
)


class StatsBlock(NamedTuple):
    """The stats lines of one block, summarised without parsing them one by one."""

    prefill: int = 0
    decode: int = 0
    usage_lines: int = 0
    high_lines: int = 0  # token usage ≥ 0.95
    peak_usage: float | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    last_prefill: tuple[int, bytes] | None = None  # (line index in the block, raw line)
    last_decode: tuple[int, bytes] | None = None


class Counted(NamedTuple):
    """Retraction lines of one run that were counted instead of passed."""

    after: int  # line index in the block of the run's last line (passed): they come before it
    lines: int
    requests: int  # their #retracted_reqs, summed


class BlockScan(NamedTuple):
    newlines: int
    candidates: tuple[tuple[int, bytes], ...]  # (line index in the block, raw line)
    stats: StatsBlock | None
    retractions: tuple[Counted, ...] = ()


class _Cursor:
    """Where the last candidate of a block started and its line index: the next one's index is
    counted from there, not from the block's start."""

    __slots__ = ("counted", "index", "offset", "run")

    def __init__(self) -> None:
        self.offset = 0
        self.index = 0
        #: the run of retraction lines held back: (index, byte offset, line, #retracted_reqs)
        self.run: list[tuple[int, int, bytes, int]] = []
        self.counted: list[Counted] = []


class Scanner:
    """Anchors of every signature and rule, and the fast path around boring lines."""

    def __init__(self, anchors: Iterable[str]) -> None:
        unique = sorted({a for a in anchors if a}, key=lambda a: (-len(a), a))
        if not unique:
            raise ValueError("a scanner needs at least one anchor")
        self.anchors = tuple(unique)
        self._encoded = tuple(a.encode("utf-8") for a in unique)
        self._regex: re.Pattern[bytes] | None = None
        self._skip: re.Pattern[bytes] | None = None
        # Only when the retraction line holds no anchor but the retraction signature's and the
        # SGLang engine marker's: any other matcher of it would see fewer lines.
        own = {a for a in self._encoded if a in RETRACTION_SAMPLE}
        self._retractions_thin = own <= RETRACTION_ANCHORS
        self._tested = 0  # lines tested with substring checks so far
        self._streak = 0  # sub-blocks in a row that held lines to test
        rare = [a for a in unique if a.encode() not in STATS_HEADS]
        self._stats_boring = not any(a in s for a in rare for s in _BORING_SAMPLES[:2])
        self._access_boring = not any(a in s for a in rare for s in _BORING_SAMPLES[2:])

    # -- the anchor test ---------------------------------------------------------------------

    def _search_for(self, data: bytes) -> Callable[[bytes], object]:
        """One alternation of every anchor is the fast test, but compiling it costs a few ms, a
        noticeable part of a short run. Small inputs test lines with substring checks instead;
        the alternation is compiled once a big block or enough lines come along."""
        if self._regex is None and (len(data) > SMALL_INPUT or self._tested > SMALL_LINES):
            self._regex = re.compile(alternation(self._encoded))
        if self._regex is not None:
            return self._regex.search
        return self._contains

    def _contains(self, line: bytes) -> bool | None:
        self._tested += 1
        return any(a in line for a in self._encoded) or None

    # -- blocks ---------------------------------------------------------------------------

    def scan(self, block: bytes) -> BlockScan:
        """Candidates and stats of a block of whole lines (it ends with a newline)."""
        search = self._search_for(block)
        candidates: dict[int, bytes] = {}
        cursor = _Cursor()
        prefill = decode = newlines = 0
        pos, n = 0, len(block)
        while pos < n:  # sub-blocks of whole lines
            end = block.rfind(b"\n", pos, pos + SUB_BLOCK) + 1
            if end <= pos:
                end = block.find(b"\n", pos + SUB_BLOCK) + 1 or n
            lines = block.count(b"\n", pos, end)
            p, d = block.count(STATS_HEADS[0], pos, end), block.count(STATS_HEADS[1], pos, end)
            newlines, prefill, decode = newlines + lines, prefill + p, decode + d
            if lines < end - pos and block[end - 1] != 10:  # a last line without its newline
                lines += 1
            if not self._all_boring(block, pos, end, lines, p + d):
                if self._regex is None:
                    self._scan_lines(block, pos, end, search, candidates, cursor)
                else:
                    self._scan_runs(block, pos, end, search, candidates, cursor)
            pos = end
        self._close_run(block, candidates, cursor)
        stats = self.stats(block, prefill, decode) if prefill or decode else None
        return BlockScan(newlines, tuple(sorted(candidates.items())), stats, tuple(cursor.counted))

    def _close_run(self, block: bytes, candidates: dict[int, bytes], cursor: _Cursor) -> None:
        """The run of retraction lines held back ends (another candidate, or the block's end):
        pass its first few and its last, and count the ones between."""
        run = cursor.run
        if not run:
            return
        keep = run
        if len(run) > RETRACTIONS_KEPT + 1:
            keep, middle = [*run[:RETRACTIONS_KEPT], run[-1]], run[RETRACTIONS_KEPT:-1]
            cursor.counted.append(Counted(run[-1][0], len(middle), sum(r[3] for r in middle)))
        for index, start, line, _ in keep:
            self._add(block, start, index, line, candidates)
        cursor.run = []

    def _all_boring(self, block: bytes, start: int, end: int, lines: int, stats: int) -> bool:
        """Only stats and access lines, or only blank ones, between start and end: C-level
        counts say so. Where sub-blocks keep holding other lines (a dense log), the access
        count is mostly skipped: the exact path finds the same lines without it."""
        boring = stats if self._stats_boring else 0
        if boring == lines:
            self._streak = 0
            return True
        self._streak += 1
        if self._streak > DENSE_STREAK and self._streak % DENSE_STREAK:
            return False
        if self._access_boring:
            boring += block.count(ACCESS, start, end)
        if boring == lines or block[start:end].isspace():  # or blank lines only
            self._streak = 0
            return True
        return False

    def _skipper(self) -> re.Pattern[bytes]:
        """A run of lines that are certainly boring (blank, or a stats or access line in
        SGLang's own envelope), matched at C speed; whatever it stops at is checked exactly."""
        if self._skip is None:
            heads = []
            if self._stats_boring:
                heads.append(STATS_HEAD)
            if self._access_boring:
                heads.append(ACCESS_HEAD)
            kinds = [BLANK_LINE]
            if heads:
                kinds.append(_ENVELOPE + b"(?:" + b"|".join(heads) + rb")[^\n]*\n")
            self._skip = re.compile(b"(?:" + b"|".join(kinds) + b")*")
        return self._skip

    def _scan_runs(
        self,
        block: bytes,
        pos: int,
        stop: int,
        search: Callable[[bytes], object],
        candidates: dict[int, bytes],
        cursor: _Cursor,
    ) -> None:
        """Runs of boring lines are passed over by one regex match each; only the lines
        between them reach Python, each checked as a line of its own."""
        skip = self._skipper().match
        while pos < stop:
            start = skip(block, pos, stop).end()  # type: ignore[union-attr]  # `*` always matches
            if start >= stop:
                return
            end = block.find(b"\n", start, stop)
            end = stop if end < 0 else end
            pos = end + 1
            self._test(block, start, block[start:end], search, candidates, cursor)

    def _test(
        self,
        block: bytes,
        start: int,
        line: bytes,
        search: Callable[[bytes], object],
        candidates: dict[int, bytes],
        cursor: _Cursor,
    ) -> None:
        """One line (it starts at byte ``start``): a candidate if it is not boring and holds
        an anchor; then the stats lines just before it say what the server was doing."""
        stats_boring = self._stats_boring
        if stats_boring and (STATS_HEADS[0] in line or STATS_HEADS[1] in line):
            return
        if self._access_boring and ACCESS in line:
            return
        if not search(line):
            return
        index = cursor.index + block.count(b"\n", cursor.offset, start)
        cursor.offset, cursor.index = start, index
        if self._retractions_thin and stats_boring:
            m = RETRACTION.fullmatch(line)
            if m is not None and not search(line[: line.find(b"KV cache pool")]):
                cursor.run.append((index, start, line, int(m.group(1))))
                return
        self._close_run(block, candidates, cursor)
        self._add(block, start, index, line, candidates)

    def _add(
        self, block: bytes, start: int, index: int, line: bytes, candidates: dict[int, bytes]
    ) -> None:
        """A candidate, and the stats lines just before it: what the server was doing then."""
        for head in STATS_HEADS if self._stats_boring else ():
            context = _line_at(block, block.rfind(head, 0, start), start, index)
            if context is not None:
                candidates.setdefault(*context)
        candidates[index] = line

    def _scan_lines(
        self,
        block: bytes,
        pos: int,
        stop: int,
        search: Callable[[bytes], object],
        candidates: dict[int, bytes],
        cursor: _Cursor,
    ) -> None:
        """Small inputs: every line of the sub-block is checked (the skipping regex, like the
        alternation, would cost more to compile than it saves)."""
        offset = pos
        for line in block[pos:stop].split(b"\n"):
            here, offset = offset, offset + len(line) + 1
            if line:
                self._test(block, here, line, search, candidates, cursor)

    def stats(self, block: bytes, prefill: int, decode: int) -> StatsBlock:
        """Summarise a block's stats lines (their counts come from the caller's scan)."""
        values = _USAGE.findall(block)
        peak = max(values) if values else None
        # The usage values are all `d.dd`, so bytes compare as the numbers do.
        high = sum(map(HIGH_USAGE.__le__, values)) if peak is not None and peak >= HIGH_USAGE else 0
        first = min((i for i in (block.find(h) for h in STATS_HEADS) if i >= 0), default=-1)
        last = max(block.rfind(h) for h in STATS_HEADS)
        return StatsBlock(
            prefill=prefill,
            decode=decode,
            usage_lines=len(values),
            high_lines=high,
            peak_usage=float(peak) if peak is not None else None,
            first_ts=_ts_at(block, first),
            last_ts=_ts_at(block, last),
            last_prefill=_line_at(block, block.rfind(STATS_HEADS[0])),
            last_decode=_line_at(block, block.rfind(STATS_HEADS[1])),
        )

    # -- single lines (normalised text) ------------------------------------------------------

    def anchors_in(self, text: str) -> set[str]:
        """Which anchors a (decoded, normalised) text contains, overlapping ones included.

        Only candidate lines get here, so a loop of substring tests is cheaper than compiling a
        second alternation at start-up."""
        return {a for a in self.anchors if a in text}

    def has_anchor(self, text: str) -> bool:
        return any(a in text for a in self.anchors)


def _line_at(
    block: bytes, pos: int, known_offset: int = 0, known_index: int = 0
) -> tuple[int, bytes] | None:
    """The line holding byte ``pos``, with its index (counted from a known line start)."""
    if pos < 0:
        return None
    start = block.rfind(b"\n", 0, pos) + 1
    end = block.find(b"\n", pos)
    if start >= known_offset:
        index = known_index + block.count(b"\n", known_offset, start)
    else:
        index = known_index - block.count(b"\n", start, known_offset)
    return index, block[start : end if end >= 0 else len(block)]


def _ts_at(block: bytes, pos: int) -> str | None:
    if pos < 0:
        return None
    start = block.rfind(b"\n", 0, pos) + 1
    m = _TS.search(block, start, pos)
    return m.group(1).decode("ascii").replace("T", " ") if m else None


#: A trie node: next byte → node; the key -1 marks the end of a word.
_Trie = dict[int, "_Trie"]
#: Words longer than this join the alternation as they are (a deep trie nests as many groups,
#: and Python's regex compiler recurses on each).
TRIE_DEPTH = 96


def alternation(words: Iterable[bytes]) -> bytes:
    """One regex that finds any of the words, written as a trie (`Pre(?:fill|empt)`): Python's
    engine then tries a handful of branches at each position instead of every word (about 6×
    faster with ~300 anchors). Only whether and where some word starts is meant to be used."""
    trie: _Trie = {}
    long = []
    for word in words:
        if len(word) > TRIE_DEPTH:
            long.append(re.escape(word))
            continue
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[-1] = {}
    return b"|".join([_branches(trie), *long] if trie else long)


def _branches(node: _Trie) -> bytes:
    alts = [re.escape(bytes([c])) + _branches(node[c]) for c in sorted(k for k in node if k >= 0)]
    if not alts:
        return b""
    body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
    return b"(?:" + body + b")?" if -1 in node else body
