"""Cards by name: the memory.total of common GPUs, and a forgiving lookup of what users type.

A user types ``H100``, ``h100-80g``, or pastes nvidia-smi's product name (``NVIDIA H100 80GB
HBM3``). Each card lists the names it answers to; a name that matches none gets the nearest ones.
"""

from __future__ import annotations

from typing import NamedTuple

#: sglang-logs.md §4 lists these memory.total values, measured.
REF = "sglang-logs.md §4 (measured memory.total)"
SMI = "nvidia-smi memory.total as commonly reported (not in the reference)"


class Card(NamedTuple):
    label: str
    mib: int  # nvidia-smi / rocm-smi memory.total, what SGLang sizes its default from
    #: other names it answers to: nvidia-smi / rocm-smi product names, the bare family name when
    #: one size is what people mean by it
    aliases: tuple[str, ...] = ()
    sheet_gb: float = 0.0  # the capacity the vendor's data sheet gives
    source: str = ""  # that data sheet: its name and URL
    #: where ``mib`` comes from: the reference's measured list, else the figure nvidia-smi is
    #: commonly seen to print for the card (check with nvidia-smi --query-gpu=memory.total)
    mib_from: str = SMI


_NV = "https://www.nvidia.com/en-us/data-center/"
_A100 = (
    "NVIDIA A100 Tensor Core GPU data sheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_V100 = (
    "NVIDIA V100 Tensor Core GPU data sheet, https://images.nvidia.com/content/technologies/"
    "volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
)
_H100 = f"NVIDIA H100 Tensor Core GPU data sheet (SXM, PCIe, NVL), {_NV}h100/"
_NO_SHEET = "no public data sheet (China-market variant); memory.total as SGLang logs print it"

#: In order of memory: guess() takes the first card at or above an estimate.
CARDS: tuple[Card, ...] = (
    Card(
        "T4",
        15360,
        ("Tesla T4", "NVIDIA T4"),
        16,
        "NVIDIA T4 data sheet, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/"
        "tesla-t4/t4-tensor-core-datasheet-951643.pdf",
    ),
    Card(
        "V100-16G",
        16160,
        ("Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB", "V100 16GB"),
        16,
        _V100,
    ),
    Card(
        "A10",
        23028,
        ("NVIDIA A10", "A10G", "NVIDIA A10G"),
        24,
        "NVIDIA A10 Tensor Core GPU data sheet, https://www.nvidia.com/content/dam/en-zz/"
        "Solutions/Data-Center/a10/pdf/a10-datasheet.pdf",
    ),
    Card("L4", 23034, ("NVIDIA L4",), 24, f"NVIDIA L4 Tensor Core GPU data sheet, {_NV}l4/", REF),
    Card(
        "RTX 4090",
        24564,
        ("NVIDIA GeForce RTX 4090", "4090"),
        24,
        "NVIDIA GeForce RTX 4090 specifications, https://www.nvidia.com/en-us/geforce/"
        "graphics-cards/40-series/rtx-4090/",
        REF,
    ),
    Card(
        "RTX 3090",
        24576,
        ("NVIDIA GeForce RTX 3090", "3090", "RTX 3090 Ti", "NVIDIA GeForce RTX 3090 Ti"),
        24,
        "NVIDIA GeForce RTX 3090 family specifications, https://www.nvidia.com/en-us/geforce/"
        "graphics-cards/30-series/rtx-3090-3090ti/",
    ),
    Card(
        "V100-32G",
        32510,
        ("Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB", "V100 32GB"),
        32,
        _V100,
    ),
    Card(
        "RTX 5090",
        32607,
        ("NVIDIA GeForce RTX 5090", "5090"),
        32,
        "NVIDIA GeForce RTX 5090 specifications, https://www.nvidia.com/en-us/geforce/"
        "graphics-cards/50-series/rtx-5090/",
    ),
    Card("A100-40G", 40960, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), 40, _A100, REF),
    Card("A40", 46068, ("NVIDIA A40",), 48, f"NVIDIA A40 data sheet, {_NV}a40/"),
    Card("L40", 46068, ("NVIDIA L40",), 48, f"NVIDIA L40 data sheet, {_NV}l40/"),
    Card("L40S", 46068, ("NVIDIA L40S",), 48, f"NVIDIA L40S data sheet, {_NV}l40s/", REF),
    Card(
        "RTX A6000",
        49140,
        ("NVIDIA RTX A6000", "A6000"),
        48,
        "NVIDIA RTX A6000 data sheet, https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
    ),
    Card(
        "RTX 6000 Ada",
        49140,
        ("NVIDIA RTX 6000 Ada Generation",),
        48,
        "NVIDIA RTX 6000 Ada Generation data sheet, https://www.nvidia.com/en-us/"
        "design-visualization/rtx-6000/",
    ),
    Card(
        "H100-80G",
        81559,
        (
            "H100",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 PCIe",
            "H100-SXM",
            "H100 SXM",
            "H100 PCIe",
            "H100-PCIE",
        ),
        80,
        _H100,
        REF,
    ),
    Card("H800", 81559, ("NVIDIA H800",), 80, _NO_SHEET),
    Card("A100-80G", 81920, ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), 80, _A100, REF),
    Card("H100-NVL", 95830, ("NVIDIA H100 NVL", "H100 NVL"), 94, _H100, REF),
    Card("H20", 97871, ("NVIDIA H20",), 96, _NO_SHEET),
    Card(
        "GH200",
        97871,
        ("NVIDIA GH200 480GB",),
        96,
        f"NVIDIA GH200 Grace Hopper Superchip data sheet, {_NV}grace-hopper-superchip/",
    ),
    Card(
        "H200",
        143771,
        ("NVIDIA H200", "NVIDIA H200 NVL", "H200-141G"),
        141,
        f"NVIDIA H200 Tensor Core GPU data sheet, {_NV}h200/",
        REF,
    ),
    Card("H20-141G", 143771, ("NVIDIA H20-3e", "H20-3e"), 141, _NO_SHEET),
    Card(
        "B200",
        183359,
        ("NVIDIA B200",),
        180,
        f"NVIDIA DGX B200 data sheet (1,440 GB over 8 GPUs), {_NV}dgx-b200/",
        REF,
    ),
    Card(
        "MI300X",
        196592,
        ("AMD Instinct MI300X",),
        192,
        "AMD Instinct MI300X data sheet, https://www.amd.com/en/products/accelerators/instinct/"
        "mi300/mi300x.html",
        "rocm-smi VRAM total as commonly reported (not in the reference)",
    ),
    Card(
        "MI325X",
        262144,
        ("AMD Instinct MI325X",),
        256,
        "AMD Instinct MI325X data sheet, https://www.amd.com/en/products/accelerators/instinct/"
        "mi300/mi325x.html",
        "rocm-smi VRAM total as commonly reported (not in the reference)",
    ),
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
