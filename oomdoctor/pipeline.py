"""The whole pipeline as functions from values to values: inputs → Diagnosis.

read → normalise → extract facts → assemble the incident → budget → features → rules → verdict.
No printing, no exit codes: the CLI does those.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from oomdoctor import judge as judgements
from oomdoctor.advice.context import Context
from oomdoctor.advice.registry import actions as advise
from oomdoctor.diagnosis import Diagnosis
from oomdoctor.extract.facts import Extractor, MarkerMatcher, Matcher, SignatureMatcher
from oomdoctor.extract.renumber import renumber
from oomdoctor.extract.signatures import ALL as SIGNATURES
from oomdoctor.extract.unwrap import Unwrapper, plan_of_file
from oomdoctor.incident.assemble import Assembler
from oomdoctor.incident.feed import Feeder
from oomdoctor.judge import GpuState, Judgement
from oomdoctor.knowledge import Knowledge, builtin, family
from oomdoctor.model import Incident, Line
from oomdoctor.read import parallel
from oomdoctor.read.held import Held, fd_path
from oomdoctor.read.sources import ReadStats, iter_blocks, open_source, plain_file, read_notices
from oomdoctor.read.sources import label as source_label
from oomdoctor.rules import engine, features, schema, verdict
from oomdoctor.rules.loader import load
from oomdoctor.rules.schema import Rule, builtin_dir

if TYPE_CHECKING:  # loaded when used: live capture
    from oomdoctor.incident.live import StreamParser

Progress = Callable[[int], None]


def fact_kinds() -> set[str]:
    return {s.kind for s in SIGNATURES}


def load_rules(extra: Sequence[Path] = ()) -> tuple[Rule, ...]:
    """Built-in rules plus user rule directories; raises RuleError listing every problem."""
    return load([builtin_dir(), *extra], fact_kinds())


def load_knowledge(extra: Sequence[Path] = ()) -> Knowledge:
    """Engine markers and site marks, with the user's additions from rule directories;
    raises KnowledgeError listing every problem."""
    from oomdoctor import knowledge

    return knowledge.load(extra) if extra else builtin()


def matchers(rules: Iterable[Rule], knowledge: Knowledge | None = None) -> list[Matcher]:
    out: list[Matcher] = [SignatureMatcher(s) for s in SIGNATURES]
    out.append(MarkerMatcher((knowledge or builtin()).anchors()))
    for rule in rules:
        out.extend(rule.patterns)
    return out


def extractor_for(rules: Iterable[Rule], knowledge: Knowledge | None = None) -> Extractor:
    """The extractor of one run: every signature, knowledge marker and rule pattern, the rule
    patterns under one time budget for the run (rules/schema.py PATTERN_BUDGET), which the
    assembler's user actor regexes share (``extractor.clock``)."""
    return Extractor(matchers(rules, knowledge), pattern_budget=schema.PATTERN_BUDGET)


def read(
    names: Sequence[str],
    rules: Sequence[Rule],
    stdin: BinaryIO | None = None,
    progress: Progress | None = None,
    knowledge: Knowledge | None = None,
) -> Incident:
    """Read every input (one incident) and assemble what they say. InputError if unreadable."""
    extractor = extractor_for(rules, knowledge)
    labels = tuple(source_label(n) for n in names)
    assembler = Assembler(labels, knowledge, extractor.clock)
    notices: list[str] = []
    anchors = extractor.scanner.anchors
    physical: dict[tuple[int, int], int] = {}  # where a wrapper was taken off (renumber.py)
    held = _check_inputs(names, stdin)  # fail before reading anything
    try:
        for index, (name, label) in enumerate(zip(names, labels, strict=True)):
            # one input open at a time: a thousand rank logs need no thousand descriptors
            stream = held.get(index) or open_source(name, stdin)
            held[index] = stream
            opened = Held(stream, name, label) if name != "-" else None
            feeder = Feeder(extractor, assembler, index)
            stats = ReadStats(label)
            # read through the open descriptor, never by name again (read/held.py)
            path = fd_path(stream, Path(name)) if name != "-" else None
            plan = plan_of_file(path, anchors) if path and parallel.usable(path) else None
            scans = (
                parallel.scan_file(path, extractor.scanner, stats, progress)
                if path and plan is not None and not plan.rewrites
                else None
            )
            if scans is not None and plan is not None:
                feeder.use(plan)
                feeder.blocks(scans)
                stats.lines = feeder.lines
            else:
                blocks: Iterable[bytes] = iter_blocks(stream, stats)
                if progress is not None:
                    blocks = _counting(blocks, progress, stream)
                plain = path if path is not None and plain_file(path) else None
                unwrapper = Unwrapper(blocks, anchors, plain)
                feeder.unwrapped(unwrapper)
                stats.lines = unwrapper.physical if unwrapper.plan.rewrites else feeder.lines
                notices.extend(f"{label}: {n}" for n in unwrapper.plan.describe())
                notices.extend(f"{label}: {n}" for n in unwrapper.notices)
            physical.update(feeder.physical)
            assembler.lines_read += stats.lines
            notices.extend(read_notices(stats))
            if opened is not None:
                notices.extend(opened.notices())
                held.pop(index).close()
    finally:
        for index, stream in held.items():
            if names[index] != "-":
                stream.close()
    notices.extend(extractor.notices(labels))
    incident = renumber(assembler.incident(), physical)
    if notices:
        incident = incident._replace(notices=incident.notices + tuple(notices))
    return incident


def _check_inputs(names: Sequence[str], stdin: BinaryIO | None) -> dict[int, BinaryIO]:
    """Open every input once, so that a missing or unreadable one fails the run before any is
    read; regular files are closed again (each is reopened when its turn comes), pipes and
    standard input are kept (they cannot be opened twice). InputError for the first that fails."""
    import stat

    kept: dict[int, BinaryIO] = {}
    try:
        for index, name in enumerate(names):
            stream = open_source(name, stdin)
            regular = False
            if name != "-":
                try:
                    regular = stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
                except (OSError, ValueError):
                    regular = False
            if regular:
                stream.close()
            else:
                kept[index] = stream
    except BaseException:
        for index, stream in kept.items():
            if names[index] != "-":
                stream.close()
        raise
    return kept


def stream_parser(
    rules: Sequence[Rule],
    label: str,
    on_crash: Callable[[Line], None] | None = None,
    knowledge: Knowledge | None = None,
    decode: bool | None = None,
) -> StreamParser:
    """The incremental parser `watch` and `diagnose --follow` feed with live output.

    ``decode``: the bytes fed are decoded as ``diagnose -`` decodes standard input (gzip, bzip2,
    xz, UTF-16/32); a format that cannot be decoded sets ``input_error``. None (the default):
    decode standard input (``label`` ``<stdin>``: what ``--follow`` reads), not a server's own
    output (`watch`) nor a file's head that was decoded already."""
    from oomdoctor.incident.live import StreamParser

    extractor = extractor_for(rules, knowledge)
    return StreamParser(
        extractor,
        Assembler((source_label(label),), knowledge, extractor.clock),
        on_crash,
        label == "<stdin>" if decode is None else decode,
    )


def _counting(blocks: Iterable[bytes], progress: Progress, stream: BinaryIO) -> Iterable[bytes]:
    """Report input bytes consumed: the file position where there is one (for gzip that is the
    compressed bytes, matching the file size), else the bytes of each block."""
    try:
        last = stream.tell()
    except (OSError, ValueError):
        last = -1
    for block in blocks:
        if last >= 0:
            try:
                here = stream.tell()
                progress(here - last)
                last = here
            except (OSError, ValueError):
                last = -1
        if last < 0:
            progress(len(block))
        yield block


def judge(
    incident: Incident,
    gpu: GpuState = None,
    cuda_visible_devices: str | None = None,
    knowledge: Knowledge | None = None,
) -> Judgement:
    """The judgement stage (oomdoctor/judge): failures placed, budget, holders, fit."""
    return judgements.judge(incident, gpu, cuda_visible_devices, knowledge)


def features_of(
    incident: Incident,
    gpu: GpuState = None,
    cuda_visible_devices: str | None = None,
    knowledge: Knowledge | None = None,
) -> dict[str, features.Feature]:
    """The features rules see, for one incident and GPU state (``rules test`` uses this)."""
    return features.compute(judge(incident, gpu, cuda_visible_devices, knowledge))


def fixture_features(
    rules: Sequence[Rule], knowledge: Knowledge | None = None
) -> Callable[[Path, GpuState], dict[str, features.Feature]]:
    """What ``rules test`` runs on each fixture: read the log with every rule's patterns, then
    the features for the given GPU state."""

    def run(log: Path, gpu: GpuState) -> dict[str, features.Feature]:
        return features_of(read([str(log)], rules, knowledge=knowledge), gpu, None, knowledge)

    return run


def diagnose(
    incident: Incident,
    rules: Sequence[Rule],
    gpu: GpuState = None,
    cuda_visible_devices: str | None = None,
    engine_override: str | None = None,
    knowledge: Knowledge | None = None,
) -> Diagnosis:
    """Budget, GPU holders, features, rules and verdict for an assembled incident.

    ``gpu`` is a snapshot, the reason there is none, or None when it was not asked for.
    ``engine_override`` replaces the engine detected from the log (``--engine``).
    """
    if engine_override is not None and engine_override != family(incident.engine):
        note = (
            f"the engine was set to {engine_override} (--engine); "
            f"the log looked like {incident.engine or 'neither'}"
        )
        incident = incident._replace(engine=engine_override, notices=(*incident.notices, note))
    judgement = judge(incident, gpu, cuda_visible_devices, knowledge)
    incident, bud, view, judged = (
        judgement.incident,
        judgement.budget,
        judgement.gpu,
        judgement.oom,
    )
    primary = incident.primary
    feats = features.compute(judgement)
    findings = engine.evaluate(rules, feats)
    v = verdict.decide(findings, incident, bud, primary, feats)
    top = findings[0].rule if findings else None
    ctx = Context(incident, bud, primary, feats, view, top.remedy if top else None, judged)
    actions = advise(top.advice if top else None, ctx)
    notices = incident.notices + bud.notices + (view.notes if view else ())
    return Diagnosis(
        verdict=v,
        actions=actions,
        findings=findings,
        budget=bud,
        incident=incident,
        notices=notices,
        gpu=view,
        oom=judged,
        phase=judgement.phase,
        site=judgement.site,
        phase_rival=judgement.phase_rival,
    )


def run(
    names: Sequence[str],
    rules: Sequence[Rule],
    stdin: BinaryIO | None = None,
    progress: Progress | None = None,
    gpu: GpuState = None,
    cuda_visible_devices: str | None = None,
    engine_override: str | None = None,
    knowledge: Knowledge | None = None,
) -> Diagnosis:
    incident = read(names, rules, stdin, progress, knowledge)
    return diagnose(incident, rules, gpu, cuda_visible_devices, engine_override, knowledge)
