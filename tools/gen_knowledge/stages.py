"""Table c: the pipeline stage names of sglang-omni and vllm-omni, and what each stage is.

Names come from the code: ``...StageConfig(name="image_encoder", factory_path=...)`` calls
(sglang-omni), ``model_stage="thinker"`` keywords and defaults, and ``model_stage:`` keys of the
stage config YAML files (vllm-omni). A stage's kind is read from the words of its name, then of
its factory, with the seeds' ``[stages]`` vocabulary (the first kind with a matching word wins).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tools.gen_knowledge.release import Release

YAML_STAGE = re.compile(r"^\s*(?:-\s*)?model_stage:\s*['\"]?([A-Za-z0-9_.-]+)", re.MULTILINE)


def stage_names(release: Release) -> Iterator[tuple[str, str, str]]:
    """(stage name, factory or origin, file) of every stage the release declares."""
    for info in release.files.values():
        for callee, name, factory in info.stages:
            if callee == "model_stage":
                yield name, "", info.path
            else:
                yield name, factory, info.path
    for yaml in sorted(release.root.rglob("*.y*ml")):
        if yaml.suffix not in (".yaml", ".yml"):
            continue
        text = yaml.read_text("utf-8", "replace")
        for match in YAML_STAGE.finditer(text):
            yield match.group(1), "", yaml.relative_to(release.root).as_posix()


def words(text: str) -> list[str]:
    """``talker_ar`` -> [talker, ar]; ``create_image_encoder_executor`` -> [create, image, ...]."""
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def kind(name: str, factory: str, vocabulary: dict[str, Any]) -> str:
    """The first kind of the vocabulary that a word of the name (then of the factory) has."""
    order: list[str] = vocabulary["order"]
    for text in (name, factory.rpartition(".")[2]):
        found = set(words(text))
        for k in order:
            if found & set(vocabulary[k]):
                return k
    return "other"
