"""Command line. The only module that touches stdin/stdout/stderr, files and exit codes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from oomdoctor import __version__

EXIT_OK = 0
EXIT_OOM = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INTERNAL = 70


def _fail(message: str, hint: str | None = None, code: int = EXIT_INPUT) -> NoReturn:
    click.echo(f"oomdoctor: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def _load_rules(rule_dirs: tuple[str, ...]) -> Any:
    return _load(rule_dirs)[0]


def _load(rule_dirs: tuple[str, ...]) -> tuple[Any, Any]:
    """The rules and the knowledge tables (engine markers, site marks) of the built-in set plus
    the user's directories; every problem in every file is reported before failing."""
    from oomdoctor.knowledge import KnowledgeError
    from oomdoctor.pipeline import load_knowledge, load_rules
    from oomdoctor.rules.schema import RuleError

    dirs = [Path(d) for d in rule_dirs]
    problems: list[str] = []
    rules = knowledge = None
    try:
        rules = load_rules(dirs)
    except RuleError as exc:
        problems.extend(exc.problems)
    try:
        knowledge = load_knowledge(dirs)
    except KnowledgeError as exc:
        problems.extend(exc.problems)
    if problems:
        for problem in problems:
            click.echo(f"oomdoctor: {problem}", err=True)
        _fail(
            f"{len(problems)} problem(s) in rule files",
            "each rule file is documented in README.md (Writing a rule); "
            "`oomdoctor rules features` lists the names conditions can use",
        )
    return rules, knowledge


def _write(text: str, output: str | None) -> None:
    if output and output != "-":
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            _fail(f"cannot write {output}: {exc.strerror or exc}")
        return
    sys.stdout.write(text)
    sys.stdout.flush()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oomdoctor")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Why did the SGLang (or vLLM) server run out of GPU memory, and what should change?

    Exit codes: 0 no OOM found, 1 an OOM was diagnosed, 2 usage error,
    3 unreadable input or invalid rule files, 70 internal error.
    """
    ctx.obj = {"debug": debug}


@cli.command()
@click.argument("logs", nargs=-1, metavar="[LOG ...|-]")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown", "json"]),
    default="text",
    show_default=True,
    help="Report format.",
)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Add the rules in DIR (repeatable).",
)
@click.option("--no-redact", is_flag=True, help="Do not mask API keys, tokens and passwords.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when an OOM is diagnosed.")
@click.option(
    "--snapshot",
    "snapshots",
    multiple=True,
    metavar="FILE",
    help="GPU state saved on the GPU host: `oomdoctor snapshot` JSON, `nvidia-smi -q -x` XML, or "
    "`nvidia-smi --query-compute-apps/--query-gpu ... --format=csv` (repeat to join two CSVs).",
)
@click.option("--no-gpu", is_flag=True, help="Do not read the GPU state (no live NVML snapshot).")
@click.option(
    "--cuda-visible-devices",
    metavar="LIST",
    help="The server's CUDA_VISIBLE_DEVICES, to map its ranks to GPUs in the snapshot.",
)
@click.option(
    "--svg", metavar="FILE", help="Also draw the card (now and recommended) as an SVG file."
)
@click.option(
    "--follow",
    is_flag=True,
    help="Read standard input as it flows; take the GPU snapshot at the crash, report at the end.",
)
@click.option(
    "--tee",
    is_flag=True,
    help="With --follow: copy the input to stdout unchanged (report to stderr).",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "sglang", "vllm"]),
    default="auto",
    show_default=True,
    help="The server that wrote the log (auto: detected from the log).",
)
def diagnose(
    logs: tuple[str, ...],
    fmt: str,
    output: str | None,
    rule_dirs: tuple[str, ...],
    no_redact: bool,
    exit_zero: bool,
    snapshots: tuple[str, ...],
    no_gpu: bool,
    cuda_visible_devices: str | None,
    svg: str | None,
    follow: bool,
    tee: bool,
    engine: str,
) -> None:
    """Diagnose one incident from LOG files (several = one incident, e.g. one per rank).

    With no LOG (or "-") the log is read from standard input:
    `python -m sglang.launch_server ... 2>&1 | oomdoctor diagnose -`. Without --snapshot or
    --no-gpu, the GPUs of this machine are read through NVML when it is available.
    """
    if snapshots and no_gpu:
        _fail("--snapshot and --no-gpu exclude each other", code=EXIT_USAGE)
    if tee and not follow:
        _fail("--tee goes with --follow", code=EXIT_USAGE)
    if follow and logs not in ((), ("-",)):
        _fail("--follow reads standard input: give no LOG, or -", code=EXIT_USAGE)
    names = list(logs) or ["-"]
    if "-" in names and sys.stdin.isatty() and not logs:
        _fail(
            "no input: give a log file, or pipe the server's output in",
            "oomdoctor diagnose server.log   or   ... 2>&1 | oomdoctor diagnose -",
            EXIT_USAGE,
        )
    if names.count("-") > 1:
        _fail("standard input (-) can be read only once", code=EXIT_USAGE)
    rules, knowledge = _load(rule_dirs)

    from oomdoctor import pipeline
    from oomdoctor.model import OOM_CATEGORIES
    from oomdoctor.read.sources import InputError

    if follow:
        _follow(
            rules,
            knowledge,
            fmt,
            output,
            no_redact,
            exit_zero,
            snapshots,
            no_gpu,
            cuda_visible_devices,
            svg,
            tee,
            engine,
        )
    from oomdoctor.read import progress

    gpu = _gpu_state(snapshots, no_gpu)
    bar = progress.for_inputs(names)
    try:
        diagnosis = pipeline.run(
            names,
            rules,
            stdin=sys.stdin.buffer,
            progress=bar,
            gpu=gpu,
            cuda_visible_devices=cuda_visible_devices,
            engine_override=None if engine == "auto" else engine,
            knowledge=knowledge,
        )
    except InputError as exc:
        _fail(str(exc), "give a readable log file, a .gz file, or - for standard input")
    finally:
        if bar is not None:
            bar.close()
    _emit(diagnosis, fmt, output, no_redact, svg, sys.stdout)
    oom = diagnosis.verdict.category in OOM_CATEGORIES
    sys.exit(EXIT_OOM if oom and not exit_zero else EXIT_OK)


def _emit(
    diagnosis: Any, fmt: str, output: str | None, no_redact: bool, svg: str | None, stream: Any
) -> None:
    """Build, redact and render the report; write it to ``output`` or to ``stream``."""
    from oomdoctor.report.build import build_report
    from oomdoctor.report.redact import redact_report
    from oomdoctor.report.render import render

    data = build_report(diagnosis)
    if not no_redact:
        data = redact_report(data)
    _write_svg(data, svg)
    to_terminal = not output and stream.isatty()
    color = to_terminal and "NO_COLOR" not in os.environ
    width = _terminal_width() if to_terminal else 100
    text = render(data, fmt, color=color, width=max(width, 60))
    if output and output != "-":
        _write(text, output)
    else:
        stream.write(text)
        stream.flush()


def _live_snapshotter(no_gpu: bool, snapshots: tuple[str, ...]) -> Any:
    """What to call at the crash: NVML now, unless the user gave a file or --no-gpu."""
    if no_gpu or snapshots:
        return None
    from oomdoctor.gpu import nvml

    return nvml.take


def _capture_fields(capture: Any) -> dict[str, Any] | None:
    from datetime import datetime

    def iso(t: float | None) -> str | None:
        return (
            None
            if t is None
            else datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")
        )

    if capture.crash_line is None:
        return None
    return {
        "crash_line": capture.crash_line.number,
        "crash_time": iso(capture.crash_time),
        "snapshot_time": iso(capture.snapshot_time),
        "snapshot_after_s": None
        if capture.snapshot_time is None or capture.crash_time is None
        else round(capture.snapshot_time - capture.crash_time, 3),
    }


def _after_capture(capture: Any, snapshots: tuple[str, ...], no_gpu: bool) -> Any:
    """The GPU state for a live run: the crash-time snapshot, a given file, or why there is none."""
    from oomdoctor.gpu.view import Unavailable

    if capture.snapshot is not None:
        return capture.snapshot
    if snapshots or no_gpu:
        return _gpu_state(snapshots, no_gpu)
    return Unavailable("no crash signature was seen, so no snapshot was taken")


def _follow(
    rules: Any,
    knowledge: Any,
    fmt: str,
    output: str | None,
    no_redact: bool,
    exit_zero: bool,
    snapshots: tuple[str, ...],
    no_gpu: bool,
    cuda_visible_devices: str | None,
    svg: str | None,
    tee: bool,
    engine: str = "auto",
) -> None:
    """`diagnose --follow -`: parse a pipe as it flows, snapshot at the crash, report at EOF."""
    from oomdoctor import pipeline
    from oomdoctor.cli.supervise import Capture
    from oomdoctor.model import OOM_CATEGORIES

    capture = Capture(_live_snapshotter(no_gpu, snapshots))
    parser = pipeline.stream_parser(rules, "<stdin>", capture.crashed, knowledge)
    fd = sys.stdin.fileno()
    out = sys.stdout.fileno()
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        if tee:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        parser.feed(data)
    parser.close()
    capture.wait()
    gpu = _after_capture(capture, snapshots, no_gpu)
    diagnosis = pipeline.diagnose(
        parser.incident(), rules, gpu, cuda_visible_devices, None if engine == "auto" else engine
    )
    diagnosis = diagnosis._replace(capture=_capture_fields(capture))
    _emit(diagnosis, fmt, output, no_redact, svg, sys.stderr if tee else sys.stdout)
    oom = diagnosis.verdict.category in OOM_CATEGORIES
    sys.exit(EXIT_OOM if oom and not exit_zero else EXIT_OK)


def _gpu_state(snapshots: tuple[str, ...], no_gpu: bool) -> Any:
    """A loaded snapshot, a live one, or why there is none (--no-gpu never imports pynvml)."""
    from oomdoctor.gpu.view import Unavailable

    if no_gpu:
        return Unavailable("not read (--no-gpu)")
    if snapshots:
        from oomdoctor.gpu.loaders import load
        from oomdoctor.gpu.snapshot import SnapshotError

        try:
            return load([Path(s) for s in snapshots])
        except SnapshotError as exc:
            _fail(
                f"cannot read the snapshot: {exc}",
                "give `oomdoctor snapshot` JSON, `nvidia-smi -q -x` XML, or nvidia-smi CSV output",
            )
    from oomdoctor.gpu import nvml

    return nvml.take()


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--log", "log_path", metavar="FILE", help="Also append the server's output to FILE.")
@click.option("-o", "--output", metavar="REPORT", help="Also write the report to REPORT.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown", "json"]),
    default="text",
    show_default=True,
    help="Format of the REPORT file (the summary on stderr is always text).",
)
@click.option("--always", is_flag=True, help="Report even when the server exits cleanly.")
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds after a crash line before a server that hangs is diagnosed anyway.",
)
@click.option("--no-gpu", is_flag=True, help="Do not read the GPU state at the crash.")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add the rules in DIR.")
@click.option("--no-redact", is_flag=True, help="Do not mask API keys, tokens and passwords.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def watch(
    log_path: str | None,
    output: str | None,
    fmt: str,
    always: bool,
    grace: float,
    no_gpu: bool,
    rule_dirs: tuple[str, ...],
    no_redact: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (after --), pass its output through unchanged, diagnose if it crashes.

    oomdoctor watch --log server.log -- python -m sglang.launch_server --model-path ...

    The GPU snapshot is taken the moment a crash line appears. Exits with the server's status
    (128+N when a signal N ended it); SIGINT/SIGTERM/SIGHUP go to the server's process group.
    """
    from oomdoctor import pipeline
    from oomdoctor.cli.supervise import Capture, run

    args = list(command)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        _fail(
            "no command to run", "oomdoctor watch -- python -m sglang.launch_server ...", EXIT_USAGE
        )
    rules, knowledge = _load(rule_dirs)
    capture = Capture(_live_snapshotter(no_gpu, ()))
    parser = pipeline.stream_parser(
        rules, log_path or "<server output>", capture.crashed, knowledge
    )
    log = None
    if log_path:
        try:
            log = Path(log_path).open("ab")  # noqa: SIM115 - closed below, after the child ends
        except OSError as exc:
            _fail(f"cannot open {log_path}: {exc.strerror or exc}")
    reported = False

    def report_now() -> None:
        nonlocal reported
        diagnosis = pipeline.diagnose(parser.incident(), rules, _after_capture(capture, (), no_gpu))
        diagnosis = diagnosis._replace(capture=_capture_fields(capture))
        sys.stderr.write("\n-- oomdoctor --\n")
        _emit(diagnosis, "text", None, no_redact, None, sys.stderr)
        if output:
            _emit(diagnosis, fmt, output, no_redact, None, sys.stderr)
        reported = True

    try:
        result = run(args, parser, capture, log=log, grace_s=grace, on_hang=report_now)
    except FileNotFoundError:
        _fail(f"cannot run {args[0]!r}: no such command", code=127)
    except PermissionError:
        _fail(f"cannot run {args[0]!r}: permission denied", code=126)
    finally:
        if log is not None:
            log.close()
    if not reported and (capture.crash_line is not None or result.status != 0 or always):
        report_now()
    sys.exit(result.status)


@cli.command()
@click.option(
    "-o", "--output", metavar="FILE", help="Write the snapshot to FILE instead of stdout."
)
@click.option("--no-redact", is_flag=True, help="Keep command lines as they are (may hold keys).")
def snapshot(output: str | None, no_redact: bool) -> None:
    """Save this machine's GPU state (devices, processes, memory) as JSON for `diagnose --snapshot`.

    Reads NVML; falls back to `nvidia-smi -q -x`. Exits 3 when neither works.
    """
    import json

    from oomdoctor.gpu import nvml, smi
    from oomdoctor.gpu.snapshot import to_json
    from oomdoctor.gpu.view import Unavailable
    from oomdoctor.report.redact import Redactor

    state = nvml.take()
    if isinstance(state, Unavailable):
        fallback = smi.take()
        if isinstance(fallback, Unavailable):
            _fail(
                f"no GPU state: {state.reason}; {fallback.reason}",
                state.hint
                or "run this on the GPU host (inside the server's container, or with "
                "--pid=host to name the processes)",
            )
        state = fallback
    data = to_json(state)
    if not no_redact:
        data = Redactor().walk(data)
    _write(json.dumps(data, indent=2) + "\n", output)


def _write_svg(data: dict[str, Any], svg: str | None) -> None:
    """Draw the report's picture of the card into an SVG file and point the report at it."""
    if not svg:
        return
    pic = data.get("picture")
    if not pic:
        click.echo("oomdoctor: no picture to draw: the log lacks the memory numbers", err=True)
        return
    from oomdoctor.report import picture

    rows = [(f"now: --mem-fraction-static {pic['before']['y']:.2f}", pic["before"])]
    if pic.get("after"):
        rows.append((f"recommended: --mem-fraction-static {pic['after']['y']:.2f}", pic["after"]))
    try:
        Path(svg).write_text(picture.svg(rows), encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot write {svg}: {exc.strerror or exc}")
    pic["svg"] = svg


def _size_gib(value: str | None, option: str) -> float | None:
    """``80GiB``, ``80G``, ``80GB`` (GiB, as SGLang means it), ``81559MiB``, or a bare GiB number."""
    if value is None:
        return None
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GiB|GB|G|MiB|MB|M|TiB|TB|T)?\s*", value, re.IGNORECASE)
    if not m:
        _fail(
            f"{option}: cannot read {value!r} as a size", "e.g. 80GiB, 81559MiB or 78", EXIT_USAGE
        )
    unit = (m.group(2) or "G")[0].upper()
    return float(m.group(1)) * {"G": 1.0, "M": 1 / 1024, "T": 1024.0}[unit]


@cli.command()
@click.option(
    "--gpu", "gpu_name", metavar="NAME", help="A card by name: H100-80G, A100-40G, H200, L4, ..."
)
@click.option("--gpu-mem", metavar="SIZE", help="The card's memory.total, e.g. 80GiB or 81559MiB.")
@click.option(
    "--pre-load-memory",
    metavar="SIZE",
    help="Free memory before weights load, if known (a log's `Load weight begin. avail mem`).",
)
@click.option(
    "--model",
    "model_path",
    metavar="DIR|config.json",
    help="A local model directory or its config.json.",
)
@click.option("--weights", metavar="SIZE", help="Weights per GPU (instead of --model).")
@click.option(
    "--kv-bytes-per-token",
    type=int,
    metavar="N",
    help="KV bytes per token per GPU (instead of --model).",
)
@click.option("--tp", "--tp-size", "tp", type=click.IntRange(1), default=1, show_default=True)
@click.option("--pp", "--pp-size", "pp", type=click.IntRange(1), default=1, show_default=True)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--context-length", type=click.IntRange(1))
@click.option("--chunked-prefill-size", type=int)
@click.option("--cuda-graph-max-bs", type=click.IntRange(1))
@click.option("--max-running-requests", type=click.IntRange(1))
@click.option(
    "--mem-fraction-static",
    type=click.FloatRange(0.01, 1.0),
    help="Default: what SGLang would pick.",
)
@click.option("--sglang-version", default="0.5.23", show_default=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown", "json"]),
    default="text",
    show_default=True,
)
@click.option("-o", "--output", metavar="FILE")
@click.option("--svg", metavar="FILE", help="Also draw the card as an SVG file.")
def plan(
    gpu_name: str | None,
    gpu_mem: str | None,
    pre_load_memory: str | None,
    model_path: str | None,
    weights: str | None,
    kv_bytes_per_token: int | None,
    tp: int,
    pp: int,
    kv_cache_dtype: str,
    context_length: int | None,
    chunked_prefill_size: int | None,
    cuda_graph_max_bs: int | None,
    max_running_requests: int | None,
    mem_fraction_static: float | None,
    sglang_version: str,
    fmt: str,
    output: str | None,
    svg: str | None,
) -> None:
    """What-if budget before a launch: KV GiB and tokens, the workable --mem-fraction-static window,
    and a launch command. The worked example of DESIGN §2:

    oomdoctor plan --pre-load-memory 78GiB --weights 60GiB --mem-fraction-static 0.70
    """
    import json

    from oomdoctor.budget import model_config, sglang_defaults
    from oomdoctor.budget.plan import PlanInput, make
    from oomdoctor.report import plan_report

    card_mib: float | None = None
    card_label = None
    if gpu_name:
        found = sglang_defaults.card(gpu_name)
        if found is None:
            names = ", ".join(n for n, _ in sglang_defaults.CARDS_MIB)
            _fail(
                f"--gpu: unknown card {gpu_name!r}",
                f"known: {names}; or give --gpu-mem SIZE",
                EXIT_USAGE,
            )
        card_label, card_mib = found[0], float(found[1])
    elif gpu_mem:
        card_mib = (_size_gib(gpu_mem, "--gpu-mem") or 0.0) * 1024
        card_label = f"{card_mib:.0f} MiB card"
    shape = None
    if model_path:
        try:
            shape = model_config.load(Path(model_path))
        except model_config.ConfigError as exc:
            _fail(f"--model: {exc}", "give a local model directory or its config.json")
    inputs = PlanInput(
        card_mib=card_mib,
        card_name=card_label,
        pre_gib=_size_gib(pre_load_memory, "--pre-load-memory"),
        weights_gib=_size_gib(weights, "--weights"),
        bytes_per_token=kv_bytes_per_token,
        model=shape,
        model_path=model_path,
        tp=tp,
        pp=pp,
        kv_cache_dtype=kv_cache_dtype,
        context_length=context_length,
        chunked_prefill_size=chunked_prefill_size,
        cuda_graph_max_bs=cuda_graph_max_bs,
        max_running_requests=max_running_requests,
        mem_fraction_static=mem_fraction_static,
        sglang_version=sglang_version,
    )
    try:
        result = make(inputs)
    except ValueError as exc:
        _fail(f"plan: {exc}", "see `oomdoctor plan --help`", EXIT_USAGE)
    data = plan_report.build(result)
    _write_svg(data, svg)
    if fmt == "json":
        text = json.dumps(data, indent=2) + "\n"
    elif fmt == "markdown":
        text = plan_report.render_markdown(data)
    else:
        to_terminal = not output and sys.stdout.isatty()
        width = _terminal_width() if to_terminal else 100
        text = plan_report.render_text(
            data, color=to_terminal and "NO_COLOR" not in os.environ, width=max(width, 60)
        )
    _write(text, output)


@cli.group()
def rules() -> None:
    """List, show and test the rules."""


@rules.command("list")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add the rules in DIR.")
def rules_list(rule_dirs: tuple[str, ...]) -> None:
    """One line per rule: id, category, priority, title."""
    for rule in sorted(_load_rules(rule_dirs), key=lambda r: (-r.priority, r.id)):
        click.echo(f"{rule.id:<28} {rule.category:<20} {rule.priority:>4}  {rule.title}")


@rules.command("show")
@click.argument("rule_id")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add the rules in DIR.")
def rules_show(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """Everything a rule says: docs, conditions, fixtures."""
    loaded = _load_rules(rule_dirs)
    rule = next((r for r in loaded if r.id == rule_id), None)
    if rule is None:
        _fail(f'no such rule: "{rule_id}"', "`oomdoctor rules list` shows the ids", EXIT_USAGE)

    def cond(c: Any) -> str:
        return (
            c.key
            if c.op == "truthy"
            else f"{c.key} {c.op} {getattr(c.operand, 'pattern', c.operand)!r}"
        )

    lines = [
        f"{rule.id}: {rule.title}",
        f"category: {rule.category}   priority: {rule.priority}   confidence: {rule.confidence}",
        f"advice: {rule.advice}   file: {rule.path}",
        "",
        f"what: {rule.what}",
        f"why: {' '.join(rule.why.split())}",
        f"remedy: {rule.remedy}",
        "false positives:",
        *(f"  - {fp}" for fp in rule.false_positives),
        "references:",
        *(f"  - {ref}" for ref in rule.references),
        "when:",
        *(f"  all:  {cond(c)}" for c in rule.all),
        *(f"  any:  {cond(c)}" for c in rule.any),
        *(f"  none: {cond(c)}" for c in rule.none),
        *(
            f"pattern {p.name}: anchor {p.anchor!r}, regex {p.regex.pattern!r}"
            for p in rule.patterns
        ),
        "fires on:",
        *(f"  {p}" for p in rule.fire),
        "silent on:",
        *(f"  {p}" for p in rule.silent),
    ]
    click.echo("\n".join(lines))


@rules.command("test")
@click.argument("rule_dir", required=False, type=click.Path(file_okay=False))
def rules_test(rule_dir: str | None) -> None:
    """Check every rule (built-in, plus DIR's) fires on its fixtures and stays silent on its confusers."""
    from oomdoctor.rules.selftest import check_rules

    loaded, knowledge = _load((rule_dir,) if rule_dir else ())
    selected = [r for r in loaded if rule_dir is None or Path(rule_dir).resolve() in r.path.parents]
    failures = 0
    for result in check_rules(selected, loaded, knowledge):
        status = "ok  " if result.ok else "FAIL"
        failures += not result.ok
        click.echo(f"{status} {result.rule:<28} {result.expect:<6} {result.fixture}")
        if not result.ok:
            click.echo(f"     {result.detail}")
    click.echo(f"{failures} failure(s)")
    sys.exit(EXIT_OOM if failures else EXIT_OK)


@rules.command("markers")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add the markers in DIR.")
def rules_markers(rule_dirs: tuple[str, ...]) -> None:
    """The knowledge tables: how the engine is told from a line, and the site and phase marks."""
    knowledge = _load(rule_dirs)[1]
    lines = ["engine markers (engine, where, match):"]
    for m in knowledge.markers:
        role = f" [{m.role}]" if m.role else ""
        lines.append(f"  {m.engine:<18} {m.where:<8} {m.match}{role}")
    for title, table in (("sites", knowledge.sites), ("phases", knowledge.phases)):
        lines.append(f"{title} (in precedence order):")
        for marks in table:
            parts = [*marks.frames, *(f"code {c}" for c in marks.code)]
            parts += [f"text {t}" for t in marks.text]
            parts += [f"stage /{s.pattern}/" for s in marks.stages]
            lines.append(f"  {marks.name:<14} " + ", ".join(parts))
    click.echo("\n".join(lines))


@rules.command("features")
def rules_features() -> None:
    """The feature names rule conditions can use."""
    from oomdoctor.rules.features import FEATURE_DOCS

    for name, doc in FEATURE_DOCS.items():
        click.echo(f"{name:<36} {doc}")


def main() -> None:
    """Console entry point: usage errors exit 2, bugs exit 70 with a short message."""
    debug = "--debug" in sys.argv[1:]
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("oomdoctor: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, like other Unix tools.
        try:
            sys.stdout = Path(os.devnull).open("w")  # noqa: SIM115 - lives until exit
        finally:
            sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        click.echo("oomdoctor: interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # a bug: say so briefly, traceback only on request
        if debug:
            raise
        click.echo(
            f"oomdoctor: internal error: {type(exc).__name__}: {exc} (oomdoctor {__version__})",
            err=True,
        )
        click.echo(
            "hint: rerun with --debug for the traceback and report it with the log", err=True
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_OK)


def _terminal_width() -> int:
    import shutil  # only a terminal needs it (shutil pulls in the compression modules)

    return shutil.get_terminal_size().columns
