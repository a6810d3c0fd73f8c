"""``diagnose --follow``: a pipe, or a log file followed as ``tail -F`` follows it, parsed as it
flows, the GPUs read at the crash line, the report at the end of the input, at SIGINT/SIGTERM,
or ``--grace`` seconds after the crash line (cli/live_read.py)."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from oomdoctor.cli.common import EXIT_OK, EXIT_OOM, emit_report, fail, say
from oomdoctor.cli.gpu_state import after_capture, capture_fields, live_snapshotter
from oomdoctor.cli.live_read import Interrupts, LiveReader, stop_notice
from oomdoctor.cli.streams import silence, write_all


class Report(NamedTuple):
    """How ``diagnose --follow`` reports (the options of ``diagnose``)."""

    fmt: str
    output: str | None
    no_redact: bool
    exit_zero: bool
    snapshots: tuple[str, ...]
    no_gpu: bool
    cuda_visible_devices: str | None
    svg: str | None
    tee: bool
    engine: str
    color: str
    grace: float


def follow(rules: Any, knowledge: Any, how: Report, path: str | None = None) -> None:
    """Read standard input (``path`` None) or follow the file ``path``; report, and exit."""
    from oomdoctor import pipeline
    from oomdoctor.cli import inputs
    from oomdoctor.cli.supervise import Capture
    from oomdoctor.model import OOM_CATEGORIES
    from oomdoctor.read.sources import label as label_of

    label = "<stdin>" if path is None else label_of(path)
    capture = Capture(live_snapshotter(how.no_gpu, how.snapshots))
    crash = _CrashClock(capture)
    parser = pipeline.stream_parser(rules, label, crash.crashed, knowledge, decode=path is None)
    events: list[tuple[str, int]] = []
    source: Any
    if path is None:
        from oomdoctor.cli.live_sources import PipeSource

        source = PipeSource(sys.stdin.fileno())
    else:
        source = _followed(path, label, lambda what: events.append((what, parser.lines)))
    copy = _Tee(sys.stdout) if how.tee else None
    seen = inputs.TextSeen()
    with Interrupts() as interrupts:
        reader = LiveReader(source, interrupts, how.grace, crash.at, notify=say)
        while data := reader.chunk():
            seen.see(data)
            if copy is not None:
                copy.write(data)
            parser.feed(data)
        parser.close()
        if parser.input_error:  # a stream no decoder here reads (zstd before Python 3.14, lz4, zip)
            fail(parser.input_error)
        if not seen.text:
            if interrupts.received is not None:  # also when the input ended with the signal
                fail("interrupted before anything was read", code=128 + interrupts.received)
            fail(inputs.empty_message(["-" if path is None else path]))
        capture.wait()
        gpu = after_capture(capture, how.snapshots, how.no_gpu)
        engine = None if how.engine == "auto" else how.engine
        diagnosis = pipeline.diagnose(
            parser.incident(), rules, gpu, how.cuda_visible_devices, engine, knowledge
        )
        notices = [*_file_notices(label, events)]
        stopped = stop_notice(reader.reason, interrupts.received, how.grace, label)
        if stopped:
            notices.append(stopped)
        if getattr(source, "error", None):
            notices.append(f"{label}: reading stopped early: {source.error}")
        diagnosis = diagnosis._replace(
            capture=capture_fields(capture), notices=(*diagnosis.notices, *notices)
        )
        stream = sys.stderr if how.tee else sys.stdout
        emit_report(diagnosis, how.fmt, how.output, how.no_redact, how.svg, stream, how.color)
        oom = diagnosis.verdict.category in OOM_CATEGORIES
        if copy is not None and reader.reason == "grace":
            _copy_on(source, interrupts, copy)
    sys.exit(EXIT_OOM if oom and not how.exit_zero else EXIT_OK)


class _CrashClock:
    """The capture at the crash line, and when it came (monotonic seconds, for the grace)."""

    def __init__(self, capture: Any) -> None:
        self._capture = capture
        self.when: float | None = None

    def crashed(self, line: Any) -> None:
        self.when = time.monotonic()
        self._capture.crashed(line)

    def at(self) -> float | None:
        return self.when


def _followed(path: str, label: str, on_event: Any) -> Any:
    """The file ``path`` to follow, or a one-line error (exit 3) when it cannot be."""
    from oomdoctor.cli.live_sources import FollowedFile
    from oomdoctor.read.decode import SNIFF_BYTES, needs_decoding

    try:
        st = Path(path).stat()
    except FileNotFoundError:
        fail(f"{label}: no such file", "--follow FILE follows a log that exists")
    except OSError as exc:
        fail(f"{label}: {exc.strerror or exc}")
    if stat.S_ISDIR(st.st_mode):
        fail(f"{label}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        fail(
            f"{label}: not a regular file: --follow FILE follows a log file",
            "for a pipe: ... | oomdoctor diagnose --follow -",
        )
    try:
        source = FollowedFile(path, on_event)
        head = os.pread(source.fd, SNIFF_BYTES, 0)
    except OSError as exc:
        fail(f"{label}: {exc.strerror or exc}")
    if needs_decoding(head):
        source.close()
        fail(
            f"{label}: compressed or UTF-16/32: --follow FILE follows a plain-text log",
            f"diagnose it without --follow: oomdoctor diagnose {path}",
        )
    return source


def _file_notices(label: str, events: list[tuple[str, int]]) -> list[str]:
    """``server.log: replaced (rotated) after line 120; truncated after line 300 ...``."""
    if not events:
        return []
    words = {"replaced": "replaced (rotated)", "truncated": "truncated"}
    said = [f"{words.get(what, what)} after line {lines}" for what, lines in events]
    return [
        f"{label}: {'; '.join(said)} while it was followed; it was read on from the start of "
        "the new content, and lines are numbered in reading order across it"
    ]


def _copy_on(source: Any, interrupts: Interrupts, copy: _Tee) -> None:
    """``--tee`` after a report that did not wait for the input's end: the copy goes on until
    the input ends or a signal comes."""
    say("the input is still open after the report: copying it on (--tee) until it ends or Ctrl-C")
    reader = LiveReader(source, interrupts, None)
    while data := reader.chunk():
        copy.write(data)


class _Tee:
    """``--tee``'s copy of the input on stdout. When it cannot be written the input is still read
    to its end and diagnosed: a reader that went away (``| head``) stops the copy quietly, any
    other failure (a closed stdout, ``/dev/full``) with one warning."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.fd: int | None = None
        if stream is None:
            say("warning: standard output is closed: the input is not copied (--tee)")
            return
        self.fd = stream.fileno()

    def write(self, data: bytes) -> None:
        if self.fd is None:
            return
        try:
            write_all(self.fd, data)
        except BrokenPipeError:
            self.fd = None
            silence(self.stream)
        except OSError as exc:
            self.fd = None
            silence(self.stream)
            say(
                f"warning: cannot copy the input to standard output: {exc.strerror or exc}; "
                "reading on without the copy (--tee)"
            )
