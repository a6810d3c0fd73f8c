"""``oomdoctor snapshot``: save this machine's GPU state as JSON for ``diagnose --snapshot``."""

from __future__ import annotations

import click

from oomdoctor.cli.common import fail, write_output


@click.command()
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
            fail(
                f"no GPU state: {state.reason}; {fallback.reason}",
                state.hint
                or "run this on the GPU host (inside the server's container, or with "
                "--pid=host to name the processes)",
            )
        state = fallback
    data = to_json(state)
    if not no_redact:
        data = Redactor().walk(data)
    write_output(json.dumps(data, indent=2) + "\n", output)
