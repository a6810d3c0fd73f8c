"""From findings to one verdict: the category, a confidence and a one-paragraph summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oomdoctor.budget.formulas import omni_stage_kv
from oomdoctor.knowledge import PHASE_WORDS, SITE_WORDS
from oomdoctor.knowledge.kinds import CONSEQUENCE_KINDS
from oomdoctor.model import (
    Alternative,
    Budget,
    Failure,
    Incident,
    SglangBudget,
    Verdict,
    VllmBudget,
)
from oomdoctor.read.sources import binary_inputs
from oomdoctor.rules.engine import doubt_of
from oomdoctor.rules.features import Feature
from oomdoctor.rules.schema import Finding, Rule
from oomdoctor.rules.signals import signal_of
from oomdoctor.units import size

#: A runner-up of another category this close in priority makes the verdict less certain.
AMBIGUITY_GAP = 10
AMBIGUITY_PENALTY = 0.1
#: Below this confidence a verdict names its runner-up and the question that would settle it.
UNCERTAIN = 0.6


def decide(
    findings: Sequence[Finding],
    incident: Incident,
    budget: Budget,
    primary: Failure | None,
    features: Mapping[str, Feature] | None = None,
) -> Verdict:
    """Findings are highest priority first (rules.engine.evaluate)."""
    if not findings:
        return Verdict("unknown", 0.0, _unknown_summary(incident, primary))
    rule = findings[0].rule
    value = confidence(findings)
    alternatives: tuple[Alternative, ...] = ()
    doubt = doubt_of(rule, features or {})
    if doubt is not None:
        value = min(value, doubt.confidence)
        alternatives = (Alternative(doubt.alternative, _runner_up(value), doubt.question),)
    elif value < UNCERTAIN:
        rival = _rival(findings)
        if rival is not None and rival.question:
            alternatives = (Alternative(rival.category, _runner_up(value), rival.question),)
    summary = _summary(rule, incident, budget, primary)
    died = _died_of(rule, findings[0], primary)
    if died and died.split()[0] not in summary:  # a title that names the signal says it already
        summary = f"{summary[:-1]}; it died of {died}."
    if rule.user:  # said in the summary, so that every format (text, Markdown, JSON) shows it
        summary += f" [user rule {rule.id}, from --rules {rule.path}]"
    return Verdict(
        category=rule.category,
        confidence=value,
        summary=summary,
        rule=rule.id,
        explanation={"what": rule.what, "why": rule.why, "remedy": rule.remedy},
        alternatives=alternatives,
        rule_source=str(rule.path) if rule.user else None,
    )


def _died_of(rule: Rule, finding: Finding, primary: Failure | None) -> str | None:
    """The signal a process died of, where the verdict is that nothing ran out of memory."""
    if rule.category not in ("not_oom", "unknown"):
        return None
    return signal_of(
        [*(e.line.raw for e in finding.evidence), *([primary.message] if primary else [])]
    )


def _runner_up(confidence: float) -> float:
    """What is left for the runner-up when the verdict has ``confidence`` (some stays with
    neither: the log may hold a third cause)."""
    return round(max(0.05, min(confidence, 0.9 - confidence)), 2)


def _rival(findings: Sequence[Finding]) -> Rule | None:
    """The highest rule of another category the winner does not refine."""
    winner = findings[0].rule
    for other in findings[1:]:
        if other.rule.category != winner.category and other.rule.id not in winner.refines:
            return other.rule
    return None


def confidence(findings: Sequence[Finding]) -> float:
    """The winner's confidence, less AMBIGUITY_PENALTY when a rule of another category fired
    within AMBIGUITY_GAP of its priority (a rule the winner refines is no rival)."""
    rule = findings[0].rule
    value = rule.confidence
    for other in findings[1:]:
        if other.rule.id in rule.refines:
            continue  # the winner is the more specific case of this one, not a rival
        rival = other.rule
        if rival.category != rule.category and rival.priority >= rule.priority - AMBIGUITY_GAP:
            value = max(value - AMBIGUITY_PENALTY, 0.05)
            break
    return round(value, 2)


def _where(primary: Failure | None) -> str:
    """Where and when, in words: ", in the logits processor while serving (line 7)"."""
    if primary is None:
        return ""
    bits = []
    if primary.site in SITE_WORDS:
        bits.append(SITE_WORDS[primary.site])
    if primary.phase in PHASE_WORDS:
        bits.append(PHASE_WORDS[primary.phase])
    if primary.ranks:
        ranks = primary.ranks
        bits.append(
            f"on {ranks[0]}"
            if len(ranks) == 1
            else f"on {len(ranks)} ranks ({', '.join(ranks[:4])}"
            + ("…)" if len(ranks) > 4 else ")")
        )
    return (" " + " ".join(bits) if bits else "") + f" (log line {primary.line.number})"


def _summary(rule: Rule, incident: Incident, b: Budget, primary: Failure | None) -> str:
    """The rule's title, with the numbers that prove it."""
    text = rule.title + _where(primary)
    sg = b if isinstance(b, SglangBudget) else SglangBudget()
    oom = primary.oom if primary else None
    numbers: list[str] = []
    data = primary.data if primary else {}
    colocated = [data.get(k) for k in ("total", "fraction", "used")]
    if rule.category == "startup_kv_alloc" and isinstance(b, VllmBudget) and b.kv_gib is not None:
        parts = [
            f"{name} {v:.2f}"
            for name, v in (
                ("weights", b.weights_gib),
                ("activations", b.activation_gib),
                ("non-torch", b.non_torch_gib),
            )
            if v is not None
        ]
        head = (
            f"at --gpu-memory-utilization {b.gpu_memory_utilization:g} the budget "
            f"{b.budget_gib:.2f} GiB minus "
            if b.gpu_memory_utilization is not None and b.budget_gib is not None
            else "the budget minus "
        )
        numbers.append(f"{head}{', '.join(parts) or 'the rest'} leaves {b.kv_gib:.2f} GiB for KV")
        if b.kv_needed_gib:
            numbers.append(f"one max_model_len request needs {b.kv_needed_gib:.2f} GiB")
    elif rule.category == "startup_kv_alloc" and all(isinstance(v, float) for v in colocated):
        total, fraction, used = (float(v) for v in colocated)  # type: ignore[arg-type]
        kv = omni_stage_kv(total, fraction, used)
        numbers.append(
            f"the stage budget {fraction:.3f} × {total:.2f} GiB minus the {used:.2f} GiB the stage "
            f"holds leaves {kv:.2f} GiB for the KV cache"
        )
    elif rule.category == "startup_kv_alloc" and sg.kv_gib is not None and sg.mem_fraction_static:
        numbers.append(
            f"at --mem-fraction-static {sg.mem_fraction_static:g} the static share "
            f"{sg.static_gib:.2f} GiB minus weights {sg.weights_gib:.2f} GiB leaves "
            f"{sg.kv_gib:.2f} GiB for the KV cache"
        )
    elif rule.category == "startup_kv_alloc" and sg.weights_gib is not None and sg.pre_gib:
        numbers.append(
            f"weights take {sg.weights_gib:.2f} of {sg.pre_gib:.2f} GiB free before loading"
        )
    if oom is not None and oom.requested_gib is not None:
        part = f"{size(oom.requested_gib)} was requested"
        if oom.free_gib is not None:
            part += f" with {size(oom.free_gib)} free"
        if oom.total_gib is not None:
            part += f" of {size(oom.total_gib)}"
            if oom.requested_gib >= oom.total_gib:
                part += ", more than the whole card: no fraction can fit it"
        if (
            oom.free_gib is not None
            and oom.requested_gib <= oom.free_gib
            and rule.category not in ("not_oom", "unknown")  # those say why themselves
        ):
            part += _gap(
                oom.requested_gib,
                oom.free_gib,
                oom.reserved_unallocated_gib,
                rule.category == "cotenant_pressure",
            )
        numbers.append(part)
    if (
        rule.category in ("runtime_activation", "encoder_starvation")
        and sg.dynamic_gib is not None
        and sg.mem_fraction_static is not None
    ):
        numbers.append(
            f"the dynamic share at y = {round(sg.mem_fraction_static, 4):g} is "
            f"{sg.dynamic_gib:.2f} GiB"
        )
    if numbers:
        text += ": " + "; ".join(numbers)
    return text + "."


def _gap(requested: float, free: float, unallocated: float | None, other: bool) -> str:
    """Why a request no larger than the free memory failed: the message cannot say which."""
    pieces = (
        f", and PyTorch held {size(unallocated)} reserved but unallocated"
        if unallocated is not None and unallocated >= 0.01
        else ""
    )
    return (
        f" ({size(free - requested)} more than asked): so the free memory was not in one piece "
        f"(fragmentation{pieces}) or another allocation took it at the same moment (a "
        "concurrent allocation" + (", of this process or of the other one)" if other else ")")
    )


def _unknown_summary(incident: Incident, primary: Failure | None) -> str:
    binary = "; ".join(binary_inputs(incident.notices))
    if binary and primary is None:
        return (
            f"{binary[:1].upper()}{binary[1:]}: nothing in it reads as log lines. Give oomdoctor "
            "the server's output (a text file, or the output piped in)."
        )
    seen = []
    if incident.engine:
        seen.append(
            f"{incident.engine} log"
            + (f" (formats of {incident.version.label})" if incident.version.label else "")
            + (f", told by {incident.engine_why}" if incident.engine_why else "")
        )
    if incident.stack:
        seen.append("around it: " + ", ".join(incident.stack))
    tracebacks = incident.fact_counts.get("traceback_start", 0)
    if tracebacks or any(f.frames for f in incident.failures):
        seen.append(f"{max(tracebacks, 1)} traceback(s)")
    if incident.server_args_line:
        seen.append("server_args")
    if incident.ranks:
        seen.append(f"startup memory lines of {len(incident.ranks)} rank(s)")
    if incident.ready:
        seen.append("the ready line")
    if incident.stats.prefill_lines or incident.stats.decode_lines:
        seen.append(f"{incident.stats.prefill_lines + incident.stats.decode_lines} stats lines")
    text = "No GPU out-of-memory evidence found"
    if primary is not None and primary.kind in CONSEQUENCE_KINDS | {"cut_traceback"}:
        text += (
            f"; the excerpt shows that something failed ({primary.message[:160]!r}) but not "
            "why: the cause is outside it (paste the lines before)"
        )
    elif primary is not None:
        text += f"; the log's failure is not memory-related: {primary.message[:160]!r}"
    else:
        last = next((f for f in reversed(incident.facts) if f.kind == "exception"), None)
        if last is not None:
            text += f"; the last error line: {last.line.text.strip()[:160]!r}"
    if seen:
        text += ". Recognised: " + ", ".join(seen)
    elif primary is None:
        text += ". Nothing in the input looked like an SGLang, vLLM, PyTorch or CUDA log line"
    else:
        text += ". Nothing else in the input tells the engine or the cause"
    return text + "."
