"""vLLM's profiling guard: free memory grew, or used memory shrank, while vLLM profiled its own
peak at start-up (every wording, 0.4.2 – 0.33: docs/reference-ray-oom.md, "vLLM")."""

from __future__ import annotations

from oomdoctor.model import Action, Failure

_OTHER_PROCESSES = (
    "Another process released (or grabbed) GPU memory while vLLM was profiling, so vLLM could "
    "not measure its own peak: start vLLM when the other processes on the GPU are settled, or "
    "give vLLM its own GPU/container."
)


def _figures(primary: Failure) -> str:
    """The guard's two figures in words, with what they show moved ("" when not printed)."""
    data = primary.data
    initial, current, measure = data.get("initial"), data.get("current"), data.get("measure")
    if not isinstance(initial, float) or not isinstance(current, float):
        return ""
    if measure == "used":
        return (
            f" GPU memory in use went from {initial:.2f} GiB before the profile run to "
            f"{current:.2f} GiB after it: {initial - current:.2f} GiB was released although "
            "vLLM's own use grew."
        )
    return (
        f" Free GPU memory went from {initial:.2f} GiB before the profile run to {current:.2f} "
        f"GiB after it: {current - initial:.2f} GiB more was free although vLLM had just loaded "
        "its weights and run its dummy batch."
    )


def guard(primary: Failure) -> list[Action]:
    """What the guard means: someone else's memory changed during the measurement."""
    if primary.data.get("wording") != "cleanup":
        return [Action(text=_OTHER_PROCESSES)]
    return [
        Action(
            text="Not an out-of-memory: vLLM's start-up profile measured less of its own memory "
            "than it had just allocated, so memory it does not own was released during the "
            f"measurement.{_figures(primary)} This release blames memory that was 'not properly "
            "cleaned up before initializing the vLLM instance'."
        ),
        Action(
            text="If this Python process created an engine (or held GPU tensors) before: free it "
            "before the next one starts (`del llm; gc.collect(); torch.cuda.empty_cache()`, and "
            "vLLM's `destroy_model_parallel()` / `destroy_distributed_environment()`), or start "
            "each engine in a fresh process."
        ),
        Action(
            text="Otherwise another process on the GPU released memory while vLLM profiled (a "
            "container being replaced, a trainer or a second engine finishing its own start-up): "
            "start vLLM once the GPU is settled, or give it its own GPU. Raising or lowering "
            "--gpu-memory-utilization does not fix the measurement."
        ),
    ]
