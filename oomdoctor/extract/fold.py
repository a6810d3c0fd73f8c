"""Beyond 2,048 worker processes, their repeated records are counted, not assembled.

The workers of one job print the same records: every vLLM worker its `Model loading took ...`
and `Available KV cache memory: ...`, each behind its own `(VllmWorker rank=N pid=P)` prefix.
The extractor already reads such a text once (its memo); assembling each copy still costs a
Line, a stream per PID and the assembler's bookkeeping, about 50 µs a line. A real job has at
most about a thousand ranks; a log of 100k distinct PIDs is generated or hostile, and must not
take minutes (issue 22 §3).

So once FOLD_AFTER_PIDS processes have been read in detail, a line of a further process is
*folded* when its text is one already read from another process and yields only context facts
(no failure, no traceback part, no launch settings, nothing the assembler handles): it is
counted by fact kind, and its PID and process name are kept, so that the PID still counts as
this server's (detect.py ``actor_roles``) and the engine votes it would have cast are cast. Any
other line of such a process is read as every line is, and the process is read in detail from
then on, starting with its last folded line, read again and its fold taken back: the line
before a traceback places it (incident/tracebacks.py, judge/phase.py). tests/test_fold.py reads
logs with and without folding and finds the same incident. A report whose input was folded says
so in a notice (assemble.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from oomdoctor.extract.normalise import actor_prefix, worker_record
from oomdoctor.knowledge.kinds import FAILURE_KINDS

#: Processes (source, PID) read in detail before a further one's repeated lines are folded.
FOLD_AFTER_PIDS = 2048
#: Facts whose every copy matters, besides every kind the assembler handles (it passes its
#: table, ``Folder.kept``): tracebacks and their parts, launch settings, SGLang's batch
#: statistics (each goes into the stats summary), and every failure. (An OOM message's pieces,
#: `oom_part`, only go on a message open in the same process's stream: a folded process has
#: none.)
KEPT_KINDS: frozenset[str] = FAILURE_KINDS | {
    "traceback_start",
    "frame",
    "exception",
    "code",
    "stats",
    "server_args",
}
#: Kinds the assembler handles whose copies may still be folded: `Model loading took ...` only
#: clears the progress bar, which the copies read in detail before cleared.
FOLDED_HANDLED = frozenset({"vllm_weights"})
#: A process prefix ends within this many characters.
PREFIX_MAX = 200
#: Texts after a prefix remembered at once (Folder.known), and the longest remembered.
REST_MEMO = 4096
REST_MAX = 2000

#: The last folded line of a process (100k of them are kept, so they are small): its number
#: and segment index as ``number << 8 | index``, negative while it is the process's only folded
#: line, and its text in two parts (its prefix, and the text after it, shared by the copies
#: where it repeats).
_Last = tuple[int, str, str]


def fold_notice(lines: int, processes: int) -> str:
    """What the report says when lines were folded."""
    return (
        f"{lines:,} lines of {processes:,} further processes (past the first "
        f"{FOLD_AFTER_PIDS:,} read in detail) repeated what other processes had printed, with "
        "no failure in them: they were counted, not assembled; their PIDs are known as this "
        "server's where their names say so"
    )


def foldable(kinds: Iterable[str], kept: frozenset[str] = KEPT_KINDS) -> bool:
    """Whether a line with facts of these kinds may be folded (it has at least one fact)."""
    found = False
    for kind in kinds:
        if kind in kept:
            return False
        found = True
    return found


class Folded:
    """What the folded lines of a stretch of input said, handed to the assembler in bulk."""

    __slots__ = ("actors", "lines", "processes", "shapes")

    def __init__(self) -> None:
        self.lines = 0
        self.processes = 0  # processes whose first folded line is here
        #: (envelope style, the line's fact kinds) → folded lines of that shape
        self.shapes: dict[tuple[str | None, tuple[str, ...]], int] = {}
        #: PID → (its process name, its folded lines)
        self.actors: dict[int, tuple[str, int]] = {}

    def add(
        self,
        pid: int,
        actor: str | None,
        style: str | None,
        kinds: tuple[str, ...],
        lines: int = 1,
    ) -> None:
        """``lines`` folded lines of one shape (-1: one is read again after all, Folder.fold)."""
        self.lines += lines
        shape = (style, kinds)
        self.shapes[shape] = self.shapes.get(shape, 0) + lines
        if actor is not None:
            known = self.actors.get(pid)
            self.actors[pid] = (actor, lines) if known is None else (known[0], known[1] + lines)

    def kinds(self) -> dict[str, int]:
        """Fact kind → how many folded lines had it."""
        out: dict[str, int] = {}
        for (_, kinds), lines in self.shapes.items():
            for kind in kinds:
                out[kind] = out.get(kind, 0) + lines
        return out

    def styles(self) -> dict[str, int]:
        """Envelope style → folded lines in it (each would have voted for its engine)."""
        out: dict[str, int] = {}
        for (style, _), lines in self.shapes.items():
            if style is not None:
                out[style] = out.get(style, 0) + lines
        return out


class Folder:
    """One run's folding: which processes are read in detail, what was folded since the feeder
    last took it, and the last folded line of each process (read again, and uncounted, when
    the process turns out to matter: the line before a traceback opens it, tracebacks.py)."""

    def __init__(self) -> None:
        #: fact kinds never folded; None: nothing is (no assembler said what it handles)
        self.kept: frozenset[str] | None = None
        self.detailed: set[tuple[int, int]] = set()
        self.folded = Folded()
        #: the text after a `(Name pid=N) ` prefix → (style, kinds) it folded as (remember)
        self._rests: dict[str, tuple[str | None, tuple[str, ...], str]] = {}
        self._hits = 0  # copies folded from _rests since it was last cleared
        self._remembering = True
        self._last: dict[int, dict[int, _Last]] = {}  # source → PID → its last folded line

    def fold_kinds(self, kinds: tuple[str, ...], refused: bool) -> tuple[str, ...] | None:
        """The kinds a line with these facts folds as (None: it is never folded)."""
        if self.kept is None or refused or not foldable(kinds, self.kept):
            return None
        return kinds

    def fold(
        self,
        key: tuple[int, int],
        env: tuple[str | None, str | None],
        kinds: tuple[str, ...] | None,
        where: tuple[int, int, str],
    ) -> bool:
        """Fold a line (number, segment index, text) of a process not read in detail, if it
        may be (True); else the process is read in detail from now on. ``env``: its process
        name and envelope style."""
        if kinds is not None and len(self.detailed) >= FOLD_AFTER_PIDS:
            self._add(key, *env, kinds, where[0], where[1], where[2], "")
            return True
        self.detailed.add(key)
        return False

    def _add(
        self,
        key: tuple[int, int],
        actor: str | None,
        style: str | None,
        kinds: tuple[str, ...],
        number: int,
        index: int,
        head: str,
        rest: str,
    ) -> None:
        lasts = self._last.get(key[0])
        if lasts is None:
            lasts = self._last[key[0]] = {}
        first = key[1] not in lasts
        if first:
            self.folded.processes += 1
        code = number << 8 | min(index, 255)
        lasts[key[1]] = (-code - 1 if first else code, head, rest)
        self.folded.add(key[1], actor, style, kinds)

    def again(self, key: tuple[int, int]) -> tuple[int, int, str] | None:
        """A process now read in detail: its last folded line (number, segment index, text),
        to be read as every line is. The caller takes its fold back (``unfold``) once it has
        read it."""
        last = self._last.get(key[0], {}).pop(key[1], None)
        if last is None:
            return None
        code, head, rest = last
        if code < 0:  # its only folded line: the process was not folded after all
            self.folded.processes -= 1
            code = -code - 1
        return code >> 8, code & 255, head + rest

    def unfold(
        self, pid: int, actor: str | None, style: str | None, kinds: tuple[str, ...] | None
    ) -> None:
        """Take back the fold of a line read after all (``again``)."""
        if kinds is not None:
            self.folded.add(pid, actor, style, kinds, -1)

    def remember(self, line: str, style: str | None, kinds: tuple[str, ...]) -> None:
        """A folded line that is exactly a `(Name pid=N) ` prefix and a text: the text (all
        that normalising and matching it depends on) → what a copy behind another such prefix
        folds as. Only printable lines: nothing is cleaned out of them first."""
        if not self._remembering:
            return
        cut = line.find(") ", 1, PREFIX_MAX) + 1
        if cut <= 0 or len(line) - cut > REST_MAX or not line.isprintable():
            return
        if actor_prefix(line[:cut]) is None:
            return
        if len(self._rests) >= REST_MEMO:
            if self._hits < REST_MEMO // 4:  # the texts hardly repeat (each has its time)
                self._remembering = False
            self._rests.clear()
            self._hits = 0
        rest = line[cut:]  # from the space: one object, shared by the copies' _last entries
        self._rests[rest[1:]] = (style, kinds, rest)

    def known(
        self,
        source: int,
        number: int,
        raw: str,
        head: re.Pattern[str] | None,
        kinds_of: Callable[[str], tuple[str, ...] | None],
    ) -> bool:
        """Fold a whole line of a process not read in detail without normalising it again,
        where its text after the `(Name pid=N) ` prefix folded before, or where it is a vLLM
        record (normalise.worker_record) whose message folds (``kinds_of``); True when folded.
        The caller leaves out lines the full path would read as code; lines it would cut
        (``\\r``, a record head inside) are left to it here."""
        if raw[:1] != "(" or "\r" in raw or len(self.detailed) < FOLD_AFTER_PIDS:
            return False
        if head is not None and head.search(raw, 1) is not None:
            return False
        cut = raw.find(") ", 1, PREFIX_MAX) + 1
        known = self._rests.get(raw[cut + 1 :]) if cut > 0 and self._rests else None
        if known is not None:
            named = actor_prefix(raw[:cut])
            if named is None or (source, named[1]) in self.detailed:
                return False
            style, kinds, rest = known
            self._hits += 1
            self._add((source, named[1]), named[0], style, kinds, number, 0, raw[:cut], rest)
            return True
        record = worker_record(raw)
        if record is None or (source, record[1]) in self.detailed:
            return False
        found = kinds_of(record[3])
        if found is None:
            return False
        self._add((source, record[1]), record[0], record[2], found, number, 0, raw, "")
        return True

    def take(self) -> Folded | None:
        """What was folded since the last call (None: nothing)."""
        if not self.folded.lines and not self.folded.processes:
            return None
        folded, self.folded = self.folded, Folded()
        return folded
