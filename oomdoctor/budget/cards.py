"""Cards by name: the memory.total of common GPUs, and a forgiving lookup of what users type.

A user types ``H100``, ``h100-80g``, or pastes nvidia-smi's product name (``NVIDIA H100 80GB
HBM3``). Each card lists the names it answers to; a name that matches none gets the nearest ones.
"""

from __future__ import annotations

from typing import NamedTuple


class Card(NamedTuple):
    label: str
    mib: int  # nvidia-smi memory.total (sglang-logs.md §4 gives most of them)
    #: other names it answers to: nvidia-smi / rocm-smi product names, the bare family name when
    #: one size is what people mean by it
    aliases: tuple[str, ...] = ()


CARDS: tuple[Card, ...] = (
    Card("T4", 15360, ("Tesla T4",)),
    Card("A10", 23028, ("NVIDIA A10", "A10G", "NVIDIA A10G")),
    Card("L4", 23034, ("NVIDIA L4",)),
    Card("RTX 4090", 24564, ("NVIDIA GeForce RTX 4090", "4090")),
    Card("RTX 5090", 32607, ("NVIDIA GeForce RTX 5090", "5090")),
    Card("A100-40G", 40960, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB")),
    Card("L40S", 46068, ("NVIDIA L40S",)),
    Card("RTX 6000 Ada", 49140, ("NVIDIA RTX 6000 Ada Generation",)),
    Card("H100-80G", 81559, ("H100", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "H100-SXM")),
    Card("A100-80G", 81920, ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")),
    Card("H800", 81559, ("NVIDIA H800",)),
    Card("H100-NVL", 95830, ("NVIDIA H100 NVL",)),
    Card("H20", 97871, ("NVIDIA H20",)),
    Card("GH200", 97871, ("NVIDIA GH200 480GB",)),
    Card("H200", 143771, ("NVIDIA H200", "NVIDIA H200 NVL", "H200-141G")),
    Card("H20-141G", 143771, ("NVIDIA H20-3e", "H20-3e")),
    Card("B200", 183359, ("NVIDIA B200",)),
    Card("MI300X", 196592, ("AMD Instinct MI300X",)),
    Card("MI325X", 262144, ("AMD Instinct MI325X",)),
)


def _key(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``h10080gbhbm3``; ``h100-80g`` and ``H100 80GB`` meet."""
    k = "".join(c for c in name.lower() if c.isalnum())
    return k.replace("gb", "g")


def _names(c: Card) -> tuple[str, ...]:
    return (c.label, *c.aliases)


def find(name: str) -> Card | None:
    """The card a name means, or None. Exact names first, then a unique family prefix."""
    want = _key(name)
    if not want:
        return None
    for c in CARDS:
        if any(_key(n) == want for n in _names(c)):
            return c
    # "a100 80" or "h200 141gb": a prefix that only one card size answers to
    hits = [c for c in CARDS if any(_key(n).startswith(want) for n in _names(c))]
    return hits[0] if hits and len({c.mib for c in hits}) == 1 else None


def nearest(name: str, n: int = 3) -> list[str]:
    """Card labels whose names are closest to a name that matched none (typos, half names)."""
    import difflib  # only a name that matched no card pays for it

    want = _key(name)
    by_key = {_key(alias): c.label for c in CARDS for alias in _names(c)}
    prefixed = [label for k, label in by_key.items() if want and k.startswith(want)]
    close = difflib.get_close_matches(want, list(by_key), n=n * 2, cutoff=0.5)
    labels = dict.fromkeys([*prefixed, *(by_key[k] for k in close)])
    return list(labels)[:n]


def guess(capacity_mib: float) -> tuple[str, int] | None:
    """The common card whose memory.total is closest above an estimated capacity (within 8%)."""
    for c in CARDS:
        if capacity_mib <= c.mib <= capacity_mib * 1.08:
            return c.label, c.mib
    return None
