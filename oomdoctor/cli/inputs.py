"""What ``diagnose`` checks about its inputs around the pipeline: inputs with nothing in them, and
several files that look like different incidents.

Regular files are surveyed before the pipeline runs, from their first block only (plus, for a
file with nothing but whitespace, the rest of it); standard input and pipes are never read twice:
standard input is watched as the pipeline reads it.
"""

from __future__ import annotations

import operator
import stat
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.knowledge import family
from oomdoctor.read.sources import EMPTY_NOTICE, label

if TYPE_CHECKING:
    from oomdoctor.model import Incident

#: How much of each file is parsed to compare several files: server_args and the start-up lines
#: that date the release are at the top.
HEAD_BYTES = 1 << 20
#: Launches further apart than this are different launches: the ranks (and nodes) of one server
#: print their server_args within seconds or minutes of each other.
LAUNCH_GAP_S = 3600.0
_UTF8_BOM = b"\xef\xbb\xbf"


class TextSeen:
    """Whether any byte other than whitespace (or a leading UTF-8 byte-order mark) went by."""

    def __init__(self) -> None:
        self.text = False
        self._start = True

    def see(self, data: bytes) -> None:
        if self.text or not data:
            return
        if self._start:
            data = data.removeprefix(_UTF8_BOM)
            self._start = False
        self.text = bool(data) and not data.isspace()


class WatchedInput:
    """Standard input as the pipeline reads it, noting whether anything but whitespace came."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.seen = TextSeen()

    def read(self, size: int = -1, /) -> bytes:
        data = self._raw.read(size)
        self.seen.see(data)
        return data

    def __getattr__(self, name: str) -> Any:  # tell(), fileno(): the stream's own
        return getattr(self._raw, name)


class Watched(Protocol):
    """Standard input as the pipeline read it (WatchedInput, cli/live_read.py LiveInput)."""

    seen: TextSeen


class Survey(NamedTuple):
    """One regular file, before the pipeline reads it."""

    name: str
    blank: bool  # 0 bytes, or only whitespace (after gzip or UTF-16 decoding)
    head: Incident | None = None  # what its first HEAD_BYTES assemble to (several files only)


def survey(names: Sequence[str], rules: Any, knowledge: Any, heads: bool) -> list[Survey | None]:
    """A Survey for each regular file of ``names`` (None for ``-``, a pipe, or a file that cannot
    be opened: the pipeline reports that). ``heads``: also parse each file's head."""
    from oomdoctor import pipeline

    out: list[Survey | None] = []
    for name in names:
        wanted = heads and name != "-"
        parser = pipeline.stream_parser(rules, name, None, knowledge) if wanted else None
        blank = _blank_file(name, parser)
        if blank is None or parser is None:
            out.append(None if blank is None else Survey(name, blank))
            continue
        parser.close()
        out.append(Survey(name, blank, parser.incident()))
    return out


def _blank_file(name: str, parser: Any) -> bool | None:
    """True when the file holds nothing but whitespace; feeds its head to ``parser``."""
    from oomdoctor.read.sources import InputError, ReadStats, iter_blocks, open_source

    if name == "-":
        return None
    try:
        if not stat.S_ISREG(Path(name).stat().st_mode):
            return None  # a pipe or a device: reading it here would take the data away
        stream = open_source(name)
    except (OSError, InputError):
        return None
    seen, fed = TextSeen(), 0
    with stream:
        for block in iter_blocks(stream, ReadStats(name)):
            seen.see(block)
            if parser is not None and fed < HEAD_BYTES:
                parser.feed(block)
                fed += len(block)
            if seen.text and (parser is None or fed >= HEAD_BYTES):
                break
    return not seen.text


def empty_inputs(
    names: Sequence[str],
    surveys: Sequence[Survey | None],
    notices: Sequence[str],
    stdin: Watched | None,
) -> list[str]:
    """The inputs that held nothing to read: blank files, a blank standard input, and whatever
    the pipeline found to be 0 bytes (a pipe, gzip of nothing)."""

    def empty(name: str, surveyed: Survey | None) -> bool:
        if EMPTY_NOTICE.format(label=label(name)) in notices:
            return True
        if name == "-":
            return stdin is not None and not stdin.seen.text
        return surveyed is not None and surveyed.blank

    return [n for n, s in zip(names, surveys, strict=True) if empty(n, s)]


def empty_message(empty: Sequence[str]) -> str:
    """``a.log is empty: nothing to diagnose`` (one line, for all of them)."""
    names = ["standard input" if n == "-" else n for n in empty]
    return f"{_join(names)} {'is' if len(names) == 1 else 'are'} empty: nothing to diagnose"


def _join(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


# -- several files that look like different incidents ---------------------------------------------


class Compared(NamedTuple):
    """A fact two files of one incident share: how the warning names it, the file's value (None
    when its head does not say), and when two values mean different incidents."""

    name: str
    value: Callable[[Incident], Any]
    differ: Callable[[Any, Any], bool] = operator.ne
    show: Callable[[Any], str] = str


def _model(incident: Incident) -> str | None:
    args = incident.server_args
    path = args.get("model_path") or args.get("model")
    if not isinstance(path, str) or not path:
        return None
    return path.rstrip("/") or path


def _version(incident: Incident) -> tuple[str, str | None, str | None] | None:
    """("vLLM", v, v) from vLLM's own line, or SGLang's release range from the formats."""
    vllm = incident.server_args.get("vllm_version")
    if isinstance(vllm, str) and vllm:
        return ("vLLM", vllm, vllm)
    guess = incident.version
    if family(incident.engine) == "sglang" and (guess.low or guess.high):
        return ("SGLang", guess.low, guess.high)
    return None


def _disjoint(a: tuple[str, str | None, str | None], b: tuple[str, str | None, str | None]) -> bool:
    """Both ranges are of one engine and no release is in both."""
    from oomdoctor.incident.versions import key

    def below(high: str | None, low: str | None) -> bool:
        return high is not None and low is not None and key(high) < key(low)

    return a[0] == b[0] and (below(a[2], b[1]) or below(b[2], a[1]))


def _show_version(v: tuple[str, str | None, str | None]) -> str:
    engine, low, high = v
    if low == high:
        return f"{engine} {low}"
    if low and high:
        return f"{engine} {low}–{high}"
    return f"{engine} >={low}" if low else f"{engine} <={high}"


_FULL_TS = LazyPattern(r"(\d{4})-(\d\d)-(\d\d)[ T-](\d\d):(\d\d):(\d\d)")
_MONTH_DAY_TS = LazyPattern(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def _launched(incident: Incident) -> tuple[bool, datetime, str] | None:
    """When the launch printed its server args: (with a year?, the time, as printed)."""
    line = incident.server_args_line
    ts = line.ts if line is not None else None
    if not ts:
        return None
    full = _FULL_TS.match(ts)
    month_day = None if full else _MONTH_DAY_TS.match(ts)
    if full:
        y, mo, d, h, mi, s = (int(g) for g in full.groups())
    elif month_day:  # vLLM prints no year: a leap year also takes 02-29
        y, (mo, d, h, mi, s) = 2000, (int(g) for g in month_day.groups())
    else:
        return None
    try:
        return (full is not None, datetime(y, mo, d, h, mi, s), ts)
    except ValueError:  # not a date after all
        return None


def _far_apart(a: tuple[bool, datetime, str], b: tuple[bool, datetime, str]) -> bool:
    return a[0] == b[0] and abs((a[1] - b[1]).total_seconds()) > LAUNCH_GAP_S


def _arg(*keys: str) -> Callable[[Incident], Any]:
    """A server argument (SGLang's name, then vLLM's), None when not printed."""

    def value(incident: Incident) -> Any:
        for k in keys:
            v = incident.server_args.get(k)
            if v is not None:
                return v
        return None

    return value


#: Server arguments every rank and node of one server prints alike.
_SAME_ARGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--tp-size", ("tp_size", "tensor_parallel_size")),
    ("--pp-size", ("pp_size", "pipeline_parallel_size")),
    ("--dp-size", ("dp_size", "data_parallel_size")),
    ("--mem-fraction-static", ("mem_fraction_static",)),
    ("--gpu-memory-utilization", ("gpu_memory_utilization",)),
    ("--chunked-prefill-size", ("chunked_prefill_size",)),
    ("--context-length", ("context_length",)),
    ("--max-model-len", ("max_model_len",)),
    ("--kv-cache-dtype", ("kv_cache_dtype",)),
    ("--quantization", ("quantization",)),
)

#: What is compared, in the order the warning lists it. A fact one file does not give is not
#: compared: a rank's log without server_args never warns.
COMPARED: tuple[Compared, ...] = (
    Compared("engine", lambda incident: family(incident.engine)),
    Compared("model", _model),
    Compared("version", _version, _disjoint, _show_version),
    Compared("started", _launched, _far_apart, lambda v: str(v[2])),
    *(Compared(flag, _arg(*keys)) for flag, keys in _SAME_ARGS),
)
#: At most this many differences are named in the warning.
SHOWN = 3


def differences(a: Incident, b: Incident) -> list[str]:
    """``model /m/a vs /m/b`` for each compared fact on which the two differ."""
    out = []
    for fact in COMPARED:
        va, vb = fact.value(a), fact.value(b)
        if va is not None and vb is not None and fact.differ(va, vb):
            out.append(f"{fact.name} {fact.show(va)} vs {fact.show(vb)}")
    return out


def different_incidents(surveys: Sequence[Survey | None]) -> list[tuple[str, str, str]]:
    """(earlier file, later file, what differs) for each file that differs from an earlier one
    (the first such)."""
    heads = [(s.name, s.head) for s in surveys if s is not None and s.head is not None]
    out = []
    for i, (name, head) in enumerate(heads):
        for other, other_head in heads[:i]:
            diffs = differences(other_head, head)
            if diffs:
                more = f"; and {len(diffs) - SHOWN} more" if len(diffs) > SHOWN else ""
                out.append((other, name, "; ".join(diffs[:SHOWN]) + more))
                break
    return out
