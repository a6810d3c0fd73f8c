"""The fallback for code no table knows: what a frame's names and the operations it runs say.

The generated tables (knowledge/) name the encoder classes, the startup functions and the
messages of every indexed release; a fork, a new model file or a user's own code is not in them.
For those, two principled readings:

- names: a function or file named for a vision or audio encoder (`*vision*`, `*visual*`, `*vit*`,
  `*audio*`, `*image*`, `patch_embed`, `*vocoder*`, ...) is one;
- operations: a text decoder never runs a 2-D or 3-D convolution or `unfold` (im2col); those are
  the patch embeddings of image and video encoders, so a failure inside them is the encoder's;
- construction: a module allocates its parameters when it is built, so a failure inside a
  function named for weights (`create_weights`, `load_weights`, `weight_loader`) or inside the
  constructor of an engine's layer or model class happened while the weights were being made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from oomdoctor.model import Frame

#: Name parts that say "encoder of another modality" (matched on word parts of the function, the
#: class qualifier and the file name, not on the whole path: `/vision/` directories of unrelated
#: packages do not count).
_ENCODER_NAME = re.compile(
    r"(?i)(?:^|[_.\-/])(?:vision|visual|vit|siglip|clip|image|img|audio|speech|whisper|"
    r"video|vocoder|code2wav|mm_encoder|patch_?embed(?:ding)?|pixel|vpm|apm)(?:[_.\-/]|$|\d)"
)
#: Torch operations only image and video patch embeddings run in an LLM server.
_PATCH_OPS = re.compile(r"^(?:unfold|im2col|conv2d|conv3d)$")
_PATCH_FILES = ("torch/nn/modules/conv.py", "torch/nn/modules/fold.py", "torch/nn/functional.py")
_PATCH_CODE = re.compile(
    r"\b(?:F\.unfold|F\.conv[23]d|torch\._C\._nn\.im2col|nn\.Unfold|conv[23]d)\("
)


def encoder_frame(frames: Sequence[Frame]) -> tuple[Frame, str] | None:
    """The innermost frame that reads as encoder work, and why."""
    for frame in reversed(frames):
        path = frame.path.replace("\\", "/")
        name = path.rsplit("/", 1)[-1].removesuffix(".py")
        if "/torch/" in "/" + path:
            if any(path.endswith(f) for f in _PATCH_FILES) and (
                _PATCH_OPS.search(frame.func) or (frame.code and _PATCH_CODE.search(frame.code))
            ):
                return frame, (
                    f"{frame.func} in {name}.py is a convolution/unfold: an image or video patch "
                    "embedding (a text decoder runs none)"
                )
            continue
        for part in (frame.func, name, *_SELF_CALL.findall(frame.code)):
            m = _ENCODER_NAME.search(part)
            if m:
                return frame, f"{part!r} names encoder code ({m.group(0).strip('_./-')})"
    return None


#: The module a frame's code line calls on itself (`vision_embedding = self.vpm(pixels)`).
_SELF_CALL = re.compile(r"\bself\.(\w+)\(")


#: Function names that make or fill parameters.
_WEIGHT_NAME = re.compile(r"(?i)(?:^|_)weights?(?:_|$)|^_?load_model$|^weight_loader")
#: Where an engine keeps its layer and model classes (their constructors create parameters).
_LAYER_DIRS = ("/layers/", "/models/", "/model_executor/", "/model_loader/")
_ENGINES = ("sglang/", "vllm/", "vllm_omni/", "sglang_omni/", "vllm_ascend/")


def weights_frame(frames: Sequence[Frame]) -> tuple[Frame, str] | None:
    """The innermost engine frame that is making weights, and why."""
    for frame in reversed(frames):
        path = frame.path.replace("\\", "/")
        if not any(e in path for e in _ENGINES):
            continue
        if _WEIGHT_NAME.search(frame.func):
            return frame, f"{frame.func} makes or fills parameters"
        if frame.func == "__init__" and any(d in path for d in _LAYER_DIRS):
            name = path.rsplit("/", 1)[-1]
            return frame, f"a layer's constructor ({name}) creates its parameters"
    return None


#: The engines' model and layer packages: the forward pass runs there.
_MODEL_DIRS = ("srt/layers/", "srt/models/", "model_executor/layers/", "model_executor/models/")


def model_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame in an engine's model or layer code (the forward pass), if any."""
    for frame in reversed(frames):
        if any(d in frame.path.replace("\\", "/") for d in _MODEL_DIRS):
            return frame
    return None
