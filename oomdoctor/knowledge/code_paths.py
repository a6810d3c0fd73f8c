"""From what a traceback printed to the tables' keys, and the name fallback for code not in them.

``module_path`` maps a printed path (site-packages, ``/sgl-workspace/sglang/python/sglang/...``,
an editable checkout, a fork's ``vllm/`` inside another tree, IPython's ``~/...``, Windows
separators) to the package-relative module the generated tables use
(``vllm/model_executor/models/qwen2_5_vl.py``): the last path component that names an engine's
package starts it.

``name_heuristic`` is the fallback for code the tables do not hold. It reads only words: a
function, file or directory name, or a ``self.<attr>(`` call in the printed code line, is split
into its words (snake_case and CamelCase), and one of them names a non-text modality (vision,
visual, vit, image, video, audio, speech, pixel), an encoder block (tower, projector, vocoder,
code2wav, token2wav) or a well-known encoder family (siglip, whisper; a name that starts or
ends in ``vit``: InternViT, MoonViT, NaViT), or two of them make
``patch embed`` / ``mm encoder`` / ``multi modal``: then the code is an encoder's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import pairwise
from types import MappingProxyType

#: Package directory -> engine name of the tables.
PACKAGES = MappingProxyType(
    {
        "sglang": "sglang",
        "sglang_omni": "sglang-omni",
        "vllm": "vllm",
        "vllm_omni": "vllm-omni",
        "vllm_ascend": "vllm-ascend",
        "transformers": "transformers",
    }
)
_MODALITY = frozenset(
    {"vision", "visual", "vit", "image", "images", "img", "video", "videos", "audio", "speech"}
    | {"pixel", "pixels"}
)
_BLOCKS = frozenset({"tower", "projector", "vocoder", "code2wav", "token2wav", "siglip", "whisper"})
_PAIRS = (("patch", "embed"), ("mm", "encoder"), ("multi", "modal"), ("patch", "merger"))
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+[a-z]*[0-9]*[a-z]*")
_SELF_CALL = re.compile(r"\bself\.([A-Za-z_][A-Za-z0-9_]*)\(")


def module_path(path: str, known: Callable[[str], bool] | None = None) -> str | None:
    """The package-relative module of a printed path, or None outside the engines' packages.

    With several engine directories in the path (a checkout named ``vllm/`` holding the
    ``vllm`` package), the last that ``known`` accepts wins, else the last one.
    """
    text = path.strip().strip("\"'").replace("\\", "/")
    if not text.endswith(".py"):
        return None
    parts = [p for p in text.split("/") if p and p not in (".", "~")]
    starts = [i for i, part in enumerate(parts[:-1]) if part in PACKAGES]
    if not starts:
        return None
    candidates = ["/".join(parts[i:]) for i in reversed(starts)]
    if known is not None and len(candidates) > 1:
        for candidate in candidates:
            if known(candidate):
                return candidate
    return candidates[0]


def engine_of(module: str) -> str:
    """The engine whose package holds ``module`` (a module_path result)."""
    return PACKAGES[module.split("/", 1)[0]]


def words(name: str) -> list[str]:
    """``Qwen2_5_VisionPatchEmbed`` -> [qwen2, 5, vision, patch, embed]."""
    out: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", name):
        out.extend(w.lower() for w in _WORD.findall(part))
        low = part.lower().rstrip("0123456789")
        if low != "vit" and (low.endswith("vit") or low.startswith("vit")):
            out.append("vit")  # InternViT, MoonViT, NaViT, ViTBlock: the case splits "ViT"
    return out


def _encoder_words(found: list[str]) -> bool:
    if _MODALITY.intersection(found) or _BLOCKS.intersection(found):
        return True
    return any(first == a and second == b for a, b in _PAIRS for first, second in pairwise(found))


def name_heuristic(path: str, func: str, code: str = "") -> str | None:
    """``encoder`` when a name says so (see the module doc), else None."""
    text = path.replace("\\", "/")
    parts = [p for p in text.split("/") if p]
    names = [func]
    if parts:
        names.append(parts[-1].rsplit(".", 1)[0])
        names.extend(parts[-3:-1])  # the directories right above: models/vision/...
    if any(_encoder_words(words(name)) for name in names if name):
        return "encoder"
    if any(_encoder_words(words(attr)) for attr in _SELF_CALL.findall(code)):
        return "encoder"
    return None
