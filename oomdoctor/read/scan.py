"""Find the few lines worth parsing in blocks of a log, at close to grep's speed.

A production log is mostly boring lines: the periodic `Prefill/Decode batch` stats, uvicorn
access lines, blank lines. Per sub-block, C-level counts tell whether every line is one of
those, or besides them only retraction lines and lines the log repeats (frequent.py); such a
sub-block needs no line-by-line look. In the others one regex match passes over each run of
boring lines at C speed; only the lines it stops at reach Python, where each is checked exactly
as a line of its own and tested against the anchors of every signature and rule (one trie
regex, trie.py). The stats lines are summarised per block with a few C-level searches
(stats.py). Of each run of retraction lines, the frequent evidence of a full pool, the first
few and the last are passed and the others counted. The caller gets the candidate lines, the
counts and the summary; line numbers stay exact.

A line holding two boring markers (a stats head and an access marker) is counted twice. The
previous engine could then miss one other line of the sub-block; here the same holds, and in a
sub-block that also has retraction or learned lines the missed line can be any one of its other
lines. Only a crafted log has such lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from oomdoctor.read.cursor import Counted, Cursor
from oomdoctor.read.frequent import RETRACTION_TEXT, Frequent
from oomdoctor.read.rests import RestMemo
from oomdoctor.read.stats import STATS_HEADS, StatsBlock, line_at, summarise
from oomdoctor.read.trie import alternation

#: Sub-blocks of this size whose lines are all stats or access lines are skipped on counts alone.
SUB_BLOCK = 1 << 16
#: Below these the anchors are tested with substring checks instead of a compiled alternation.
SMALL_INPUT = 256 << 10
SMALL_LINES = 5000
#: After this many sub-blocks in a row that the counts could not settle, only every
#: DENSE_STREAK-th one is counted beyond its stats lines (the counts cost passes that then
#: rarely pay).
DENSE_STREAK = 8
#: What a Python traceback frame line holds (`  File "/x.py", line 12, in f`).
FRAME_HEAD = b'", line '
#: The source line under a frame is kept to this many bytes.
MAX_CODE = 400
#: uvicorn access lines (`"POST /generate HTTP/1.1" 200`): frequent, never evidence.
ACCESS = b" HTTP/1."
#: What counting access lines looks for: most of them, faster (fewer is safe: the count then
#: settles fewer sub-blocks).
ACCESS_COUNT = b' HTTP/1.1" '
#: SGLang's retraction line in full (any envelope): the frequent evidence kind of a full pool
#: (1-2% of a dense log's lines). Of each run of such lines with no other candidate between
#: them, the first RETRACTIONS_KEPT and the last one are passed (what features and evidence
#: read); the others are counted (Counted).
RETRACTION = re.compile(rb"(?:\[[^\]\n]{0,80}\] )?" + RETRACTION_TEXT)
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


class BlockScan(NamedTuple):
    newlines: int
    candidates: tuple[tuple[int, bytes], ...]  # (line index in the block, raw line)
    stats: StatsBlock | None
    retractions: tuple[Counted, ...] = ()


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
        self._tested = 0  # lines tested with substring checks so far
        self._misses = 0  # sub-blocks in a row that the counts could not settle
        rare = [a for a in unique if a.encode() not in STATS_HEADS]
        self._stats_boring = not any(a in s for a in rare for s in _BORING_SAMPLES[:2])
        self._access_boring = not any(a in s for a in rare for s in _BORING_SAMPLES[2:])
        # Only when the retraction line holds no anchor but the retraction signature's and the
        # SGLang engine marker's: any other matcher of it would see fewer lines.
        own = {a for a in self._encoded if a in RETRACTION_SAMPLE}
        self._retractions_thin = own <= RETRACTION_ANCHORS and self._stats_boring
        # ... and an anchor is in its fixed words: every retraction line is then a candidate.
        self._retractions_held = self._retractions_thin and bool(own)
        boring = [*STATS_HEADS] if self._stats_boring else []
        self._frequent = Frequent([*boring, ACCESS] if self._access_boring else boring)
        self._anchored = RestMemo(self._encoded).anchored

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
        cursor = Cursor()
        prefill = decode = newlines = 0
        pos, n = 0, len(block)
        while pos < n:  # sub-blocks of whole lines
            end = block.rfind(b"\n", pos, pos + SUB_BLOCK) + 1
            if end <= pos:
                end = block.find(b"\n", pos + SUB_BLOCK) + 1 or n
            lines = block.count(b"\n", pos, end)
            p, d = block.count(STATS_HEADS[0], pos, end), block.count(STATS_HEADS[1], pos, end)
            cursor.known(pos, newlines)
            newlines, prefill, decode = newlines + lines, prefill + p, decode + d
            cursor.stats = prefill + decode  # none yet: no candidate has stats lines before it
            if block[end - 1] != 10:  # a last line without its newline
                lines += 1
            if not self._settled(block, pos, end, lines, p + d, search, candidates, cursor):
                if self._regex is None:
                    self._scan_lines(block, pos, end, search, candidates, cursor)
                else:
                    self._scan_runs(block, pos, end, search, candidates, cursor)
            pos = end
        self._close_run(block, candidates, cursor)
        stats = summarise(block, prefill, decode) if prefill or decode else None
        return BlockScan(newlines, tuple(sorted(candidates.items())), stats, tuple(cursor.counted))

    def _settled(
        self,
        block: bytes,
        start: int,
        end: int,
        lines: int,
        stats: int,
        search: Callable[[bytes], object],
        candidates: dict[int, bytes],
        cursor: Cursor,
    ) -> bool:
        """Whether C-level counts settle the sub-block: only stats and access lines, or only
        blank ones, or besides those only retraction lines (then tested one by one) and lines
        the log repeats (frequent.py). Where sub-blocks keep escaping the counts, only every
        DENSE_STREAK-th one is counted: the exact path finds the same lines without them."""
        boring = stats if self._stats_boring else 0
        if boring == lines:
            return True
        if self._misses > DENSE_STREAK and self._misses % DENSE_STREAK:
            self._misses += 1
            return False
        if self._access_boring:
            boring += block.count(ACCESS_COUNT, start, end)
        if boring == lines or block[start:end].isspace():  # or blank lines only
            self._misses = 0
            return True
        kinds = self._frequent.kinds(self._retractions_thin)
        found = (
            self._frequent.lines_of(block, start, end, kinds, lines - boring, search)
            if kinds
            else None
        )
        if found is None:
            self._misses += 1
            return False
        self._misses = 0
        for at, stop, requests in found:
            if (
                requests < 0
                or not self._retractions_held
                or not self._hold(block, at, stop, requests, search, cursor)
            ):
                self._test(block, at, block[at:stop], search, candidates, cursor)
        return True

    def _close_run(self, block: bytes, candidates: dict[int, bytes], cursor: Cursor) -> None:
        """The run of retraction lines held back ends (another candidate, or the block's end):
        pass its first few and its last, and count the ones between. Their stats context is
        not needed: nothing reads it but what the block's last stats lines set anyway."""
        run = cursor.run
        if not run:
            return
        last = run[-1]
        if last[0] < 0:  # its index, counted from the known line start before it
            index = last[5] + block.count(b"\n", last[4], last[1])
            run[-1] = last = (index, *last[1:])
            cursor.known(last[1], index)
        if len(run) > RETRACTIONS_KEPT + 1:
            middle = run[RETRACTIONS_KEPT:-1]
            cursor.counted.append(Counted(last[0], len(middle), sum(r[3] for r in middle)))
            run = [*run[:RETRACTIONS_KEPT], last]
        for index, start, stop, *_ in run:
            candidates[index] = block[start:stop]
        cursor.run = []

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
        cursor: Cursor,
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
        cursor: Cursor,
    ) -> None:
        """One line (it starts at byte ``start``): a candidate if it is not boring and holds
        an anchor; then the stats lines just before it say what the server was doing."""
        if self._stats_boring and (STATS_HEADS[0] in line or STATS_HEADS[1] in line):
            return
        if self._access_boring and ACCESS in line:
            return
        if not self._anchored(line, search):
            self._frequent.learn(line)
            return
        if self._retractions_thin and b"KV cache pool" in line:  # the regex's own words
            m = RETRACTION.fullmatch(line)
            if m is not None and self._hold(
                block, start, start + len(line), int(m[1]), search, cursor
            ):
                return
        if cursor.run:
            self._close_run(block, candidates, cursor)
        self._add(block, start, cursor.index_of(block, start), line, candidates, cursor)

    def _hold(
        self,
        block: bytes,
        start: int,
        stop: int,
        requests: int,
        search: Callable[[bytes], object],
        cursor: Cursor,
    ) -> bool:
        """Hold the retraction line between start and stop back in the current run, unless its
        envelope has an anchor (another matcher may want it: it is then tested as any other
        line)."""
        head = block.find(b"KV cache pool", start, stop)
        if head > start and (
            self._regex.search(block, start, head) if self._regex else search(block[start:head])
        ):
            return False
        run = cursor.run
        if len(run) < RETRACTIONS_KEPT:
            run.append((cursor.index_of(block, start), start, stop, requests, 0, 0))
        else:
            run.append((-1, start, stop, requests, cursor.offset, cursor.index))
        return True

    def _add(
        self, block: bytes, start: int, index: int, line: bytes, out: dict[int, bytes], cur: Cursor
    ) -> None:
        """A candidate, and the stats lines just before it: what the server was doing then. A
        traceback frame brings the source line printed under it (the code tells which class's
        method it is, knowledge/code.py), whatever that line holds."""
        for head in STATS_HEADS if self._stats_boring and cur.stats else ():
            at, news = cur.last_head(block, head, start)
            context = line_at(block, at, start, index) if news else None
            if context is not None:
                out.setdefault(*context)
        out[index] = line
        if FRAME_HEAD in line:
            after = start + len(line) + 1
            end = block.find(b"\n", after)
            code = block[after : end if end >= 0 else len(block)]
            if code[:1] in (b" ", b"\t") or b'File "' not in code:
                out.setdefault(index + 1, code[:MAX_CODE])

    def _scan_lines(
        self,
        block: bytes,
        pos: int,
        stop: int,
        search: Callable[[bytes], object],
        candidates: dict[int, bytes],
        cursor: Cursor,
    ) -> None:
        """Small inputs: every line of the sub-block is checked (the skipping regex, like the
        alternation, would cost more to compile than it saves)."""
        offset = pos
        for line in block[pos:stop].split(b"\n"):
            here, offset = offset, offset + len(line) + 1
            if line:
                self._test(block, here, line, search, candidates, cursor)

    # -- single lines (normalised text) ------------------------------------------------------

    def anchors_in(self, text: str) -> set[str]:
        """Which anchors a (decoded, normalised) text contains, overlapping ones included.

        Only candidate lines get here, so a loop of substring tests is cheaper than compiling a
        second alternation at start-up."""
        return {a for a in self.anchors if a in text}

    def has_anchor(self, text: str) -> bool:
        return any(a in text for a in self.anchors)
