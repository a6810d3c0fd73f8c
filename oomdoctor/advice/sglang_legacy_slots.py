"""SGLang 0.1.x – 0.2.x's own KV-slot check: `Prefill/Decode out of memory. This should never
happen.` (../shared/reference/sglang-logs.md §10.2), the same logical failure as today's
`... Try to lower your batch size.`, printed by releases that admit a batch on a token estimate."""

from __future__ import annotations

import re

from oomdoctor.advice.context import Context, halve
from oomdoctor.model import Action, Failure

#: The 0.1.5 – 0.2.9 wordings ("nerver" is 0.1.10 / 0.1.14's spelling).
_LEGACY = re.compile(r"^(?:Prefill|Decode) out of memory\.(?: This should\b.*)?$")


def is_legacy(primary: Failure | None) -> bool:
    return (
        primary is not None
        and primary.kind == "logical_kv_failure"
        and _LEGACY.match(primary.message.strip()) is not None
    )


def actions(ctx: Context) -> list[Action]:
    primary = ctx.primary
    phase = "decode" if primary is not None and primary.message.startswith("Decode") else "prefill"
    out = [
        Action(
            text="Not a GPU OOM: this SGLang release admitted the running batch on a token "
            f"estimate, and at this {phase} step its KV pool had no free token slots left even "
            "after evicting the radix cache (the release itself says 'This should never "
            "happen'). The tree dump that follows lists the cached prefixes and how many "
            "requests hold each (r=N): held slots cannot be evicted."
        ),
        Action(
            text="The process then exit()s and the server stops answering; 0.1.17 – 0.2.5 also "
            "SIGKILL the launcher, so a `Killed` line or exit status 137 right after the dump "
            "is SGLang's own doing, not the host's OOM killer."
        ),
    ]
    running = ctx.arg_int("max_running_requests")
    last = ctx.incident.stats.last_decode
    seen = last.num("running_req") if last is not None else None
    example = max(int(seen) // 2, 1) if seen else None
    out.append(
        halve(
            "--max-running-requests",
            running,
            "fewer requests share the pool, so the estimate has slots to spare.",
            example=example,
        )
    )
    out.append(
        Action(
            text="Raise --schedule-conservativeness (default 1.0, e.g. 1.3): the scheduler then "
            "reserves more of the pool for the running requests' future tokens before it admits "
            "new ones.",
            flag="--schedule-conservativeness",
            direction="raise",
            value=1.3,
            current=ctx.incident.server_args.get("schedule_conservativeness"),
        )
    )
    out.append(
        Action(
            alternative=True,
            text="Or give the pool more tokens: a larger --mem-fraction-static, if the GPU has "
            "activation headroom left.",
        )
    )
    out.append(
        Action(
            text="Upgrade: the estimate-based admission of 0.1.x – 0.2.x is where this comes "
            "from. Later releases reserve decode tokens per request and retract requests "
            "instead; where the condition still occurs, 0.2.12+ exit with status 1 and 0.3.6+ "
            "print the tokens needed and available."
        )
    )
    return out
