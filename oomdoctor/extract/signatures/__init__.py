"""Every built-in signature, in one registry."""

from __future__ import annotations

from oomdoctor.extract.signatures import (
    colocation,
    context,
    errors,
    failures,
    ray,
    startup,
    vllm,
)
from oomdoctor.extract.signatures.base import Signature

ALL: tuple[Signature, ...] = (
    startup.SIGNATURES
    + failures.SIGNATURES
    + failures.OOM_PARTS
    + context.SIGNATURES
    + vllm.SIGNATURES
    + colocation.SIGNATURES
    + errors.SIGNATURES
    + ray.SIGNATURES
)

__all__ = ["ALL", "Signature"]
