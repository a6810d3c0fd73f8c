"""SGLang's own default for --mem-fraction-static, per release (sglang-logs.md §4).

SGLang estimates the memory it must keep outside the static share (activations, CUDA graphs,
workspaces) and sets ``y = (gpu_mem − reserved) / gpu_mem``. oomdoctor uses the same estimate as
the runtime reserve when the log has no measured one. The constants drift between releases, so
they live here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oomdoctor.incident.versions import key
from oomdoctor.model import Scalar


class Reserve(NamedTuple):
    mib: float
    basis: str

    @property
    def gib(self) -> float:
        return self.mib / 1024


def _int(args: Mapping[str, Scalar], name: str) -> int | None:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill graph shapes 0.5.23 captures for a given max token count."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))
    count = sum(len(range(lo, min(hi, max_bs) + 1, step)) for lo, hi, step in steps)
    if max_bs >= 4608:
        count += len(range(4608, max_bs + 1, 512))
    return count


def chunked_default(gpu_mib: float, era: str) -> int:
    gib = gpu_mib / 1024
    if gib < 20 or (era == "0.5.10" and gib < 35):
        return 2048
    if gib < 60:
        return 4096
    if gib < 160:
        return 8192
    return 16384


def _decode_bs_default(gpu_mib: float, tp: int, era: str) -> int:
    gib = gpu_mib / 1024
    if gib < 20:
        return 8
    if gib < 35:
        if era == "0.5.10":
            return 24 if tp < 4 else 80
        return 48 if tp < 4 else 160
    if gib < 60:
        return 32 if tp < 4 else 160
    if gib < 160:
        return 256 if tp < 4 else 512
    return 512


def era_of(version_low: str | None, version_high: str | None) -> str:
    """The newest formula the log's version range allows (unknown → the current one)."""
    ref = version_high or version_low
    if ref is None:
        return "0.5.23"
    k = key(ref)
    if k >= key("0.5.23"):
        return "0.5.23"
    if k >= key("0.5.10"):
        return "0.5.10"
    if k >= key("0.4.10"):
        return "0.5.2"
    if k >= key("0.4.6"):
        return "0.4.6"
    return "0.3.6"


def reserve(gpu_mib: float, args: Mapping[str, Scalar], era: str) -> Reserve:
    """SGLang's estimate of the memory it needs outside the static share, in MiB."""
    tp = _int(args, "tp_size") or 1
    pp = _int(args, "pp_size") or 1
    ps = tp * pp
    dp_attention = args.get("enable_dp_attention") is True
    dp = _int(args, "dp_size") or 1
    if era in ("0.5.23", "0.5.10"):
        chunked = _int(args, "chunked_prefill_size")
        if chunked is None or chunked <= 0:
            chunked = _int(args, "max_prefill_tokens") if chunked == -1 else None
        chunked = chunked or chunked_default(gpu_mib, era)
        bs = _int(args, "cuda_graph_max_bs") or _decode_bs_default(gpu_mib, tp, era)
        mla = "deepseek" in str(args.get("model_path", "")).lower()
        graphs = bs * 2.0
        if dp_attention:
            graphs += bs * dp * 3 + (bs * dp * 1.5 if bs > 300 else 0)
        if era == "0.5.23":
            graphs += (
                1536 if mla else _prefill_graph_sizes(min(chunked, 8192) if mla else chunked) * 8
            )
        activation = max(chunked, 2048)
        mib = 512 + activation * 1.5 + ps / 8 * 1024 + graphs
        floor = gpu_mib > 60 * 1024 and mib < 10 * 1024
        if floor:
            mib = 10 * 1024.0
        if era == "0.5.23" and args.get("moe_a2a_backend") == "deepep":
            mib += 2048
        basis = (
            f"SGLang {era} default: 512 + 1.5 × {activation} (chunked prefill) "
            f"+ {ps}/8 × 1024 (TP×PP) + {graphs:.0f} (CUDA graphs) MiB"
            + (", raised to the 10 GiB floor for cards over 60 GiB" if floor else "")
        )
        return Reserve(mib, basis)
    if era == "0.5.2":
        if gpu_mib < 35 * 1024:
            mib = (2.8 + ps / 10) * 1024
        elif gpu_mib < 90 * 1024:
            mib = (9.5 + ps / 2) * 1024
        elif gpu_mib < 160 * 1024:
            mib = (12 + ps / 2) * 1024
        else:
            mib = 32 * 1024
        if dp_attention:
            mib += 4096
        if args.get("speculative_algorithm") not in (None, "None"):
            mib += 2048
        return Reserve(
            mib, f"SGLang 0.4.10–0.5.2 reserved-memory table for a {gpu_mib:.0f} MiB card"
        )
    if era == "0.4.6":
        f = (
            0.79
            if ps >= 16
            else 0.81
            if ps >= 8
            else 0.85
            if ps >= 4
            else 0.87
            if ps >= 2
            else 0.88
        )
        if gpu_mib > 96 * 1024:
            f = min(f + 48 * 1024 * (1 - f) / gpu_mib, (gpu_mib - 18 * 1024) / gpu_mib)
        return Reserve((1 - f) * gpu_mib, f"SGLang 0.4.6 default fraction {f:.3f} for TP×PP={ps}")
    f = 0.79 if tp >= 16 else 0.82 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
    return Reserve((1 - f) * gpu_mib, f"SGLang 0.3.6 default fraction {f:.2f} for TP={tp}")


def ceiling(gpu_mib: float, r: Reserve) -> float:
    """The largest y that keeps SGLang's reserve outside the static share, in SGLang's own
    terms: the reserve is a share of the card, ``(gpu_mem − reserved) / gpu_mem``. This is the
    default SGLang picks, so the default is never above the window it bounds."""
    return (gpu_mib - r.mib) / gpu_mib


def default_fraction(gpu_mib: float, args: Mapping[str, Scalar], era: str) -> float:
    """What SGLang would pick for --mem-fraction-static on this card (before VLM factors)."""
    return round(ceiling(gpu_mib, reserve(gpu_mib, args, era)), 3)
