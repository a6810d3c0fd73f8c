"""Table a: the encoder classes of every multimodal model file, and the language side beside them.

Derived per release, from the code only:

1. Top-level multimodal classes: those that define a hook (seeds' ``hooks``, the methods the
   runners' encoder steps call on the model, the methods models pass to the sglang routines) or
   derive from one of vLLM's multimodal interfaces.
2. Their encoder methods: the hooks and every ``self.m()`` they reach, short of the language
   hooks (``forward``); the attributes those methods read (``self.visual``), and those built
   inside ``with self._mark_tower_model(...)``, are the towers. The attributes ``forward`` reads
   (not through a hook), and those built inside ``_mark_language_model``, are the language side.
3. The classes assigned to those attributes (``self.visual = Qwen2_5_VisionTransformer(...)``,
   through a factory function's constructor calls, through imports into other files), then
   transitively the classes their own constructors assign, and their bases.
4. transformers' classes that declare ``main_input_name`` of an encoder input or a tower
   ``config_class`` join the encoder side with their constructor closure.

A class reached from both sides (a shared norm or linear layer) is on neither.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tools.gen_knowledge.release import Release

Key = tuple[str, str]  # (module, class name)


@dataclass
class Sides:
    encoder: dict[Key, str] = field(default_factory=dict)  # class -> how it was found
    language: dict[Key, str] = field(default_factory=dict)
    top: dict[Key, set[str]] = field(default_factory=dict)  # top-level class -> encoder methods
    shared: set[Key] = field(default_factory=set)
    #: Modules that define a text model and hold no tower, multimodal or shared class.
    text_modules: set[str] = field(default_factory=set)


def hook_names(release: Release, seeds: dict[str, Any]) -> set[str]:
    """Hook names: the seeds', the methods vLLM's multimodal interfaces declare returning
    embeddings (``embed_multimodal -> MultiModalEmbeddings``), and the methods models pass to
    the sglang routines."""
    names = set(seeds["hooks"])
    routines = set(seeds["routines"])
    interfaces = set(seeds["interfaces"])
    for info in release.files.values():
        for qual, func in info.functions.items():
            cls, _, last = qual.rpartition(".")
            if cls in interfaces and "Embeddings" in func.returns:
                names.add(last)
            for call in func.calls:
                if call[0] == "passes" and call[1] in routines:
                    owner = qual.partition(".")[0]
                    if owner in info.classes and call[2] in info.classes[owner].methods:
                        names.add(call[2])
    return names


def _attr_classes(release: Release, key: Key, attrs: Iterable[str]) -> list[Key]:
    types = release.attr_types(key)
    out: list[Key] = []
    for attr in attrs:
        for built, _ in types.get(attr, []):
            module, _, name = built.partition("|")
            out.extend(release.built_classes(module, name, key))
    return out


def _closure(release: Release, start: dict[Key, str], stop: set[Key]) -> dict[Key, str]:
    """Classes the start classes build in their constructors (any method's ``self.x = C()``),
    and their bases, transitively; a top-level class (``stop``) is not entered: a hook that
    delegates to another model (``self.model.get_image_features``) names its towers there."""
    out = {k: v for k, v in start.items() if k not in stop}
    todo = list(out)
    while todo:
        key = todo.pop()
        cls = release.cls(key)
        if cls is None:
            continue
        found = _attr_classes(release, key, cls.attrs)
        # a base that runs the forward is the same tower's code (Qwen2_5_VisionTransformer
        # inherits Qwen2VisionTransformer.forward); a PreTrainedModel-like base is not
        found += [
            k
            for k in release.mro(key)
            if k != key and {"forward", "__call__"} & set(getattr(release.cls(k), "methods", {}))
        ]
        for hit in found:
            if hit not in out and hit not in stop:
                out[hit] = f"built by {key[1]}"
                todo.append(hit)
    return out


def _method_closure(release: Release, key: Key, roots: set[str], stop: set[str]) -> set[str]:
    """Own methods reached from ``roots`` by ``self.m()`` calls, not entering ``stop``."""
    cls = release.cls(key)
    if cls is None:
        return set()
    seen = {r for r in roots if r in cls.methods}
    todo = list(seen)
    while todo:
        name = todo.pop()
        func = release.func(key[0], f"{key[1]}.{name}")
        if func is None:
            continue
        for call in func.calls:
            if call[0] == "self" and call[1] in cls.methods and call[1] not in seen:
                if call[1] in stop:
                    continue
                seen.add(call[1])
                todo.append(call[1])
    return seen


def _attrs_read(release: Release, key: Key, methods: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for name in methods:
        func = release.func(key[0], f"{key[1]}.{name}")
        if func is not None:
            out |= func.self_attrs
    return out


def _attrs_called(
    release: Release, key: Key, methods: Iterable[str], whole: bool = False
) -> set[str]:
    """Attributes the methods call (``self.language_model(...)``, ``self.model.norm(...)``;
    with ``whole``, only those called themselves); reading one (``self.visual.dtype``) does not
    run it."""
    out: set[str] = set()
    for name in methods:
        func = release.func(key[0], f"{key[1]}.{name}")
        if func is not None:
            out |= {
                call[1] for call in func.calls if call[0] == "selfattr" and not (whole and call[2])
            }
    return out


def _fed(release: Release, key: Key, methods: Iterable[str], inputs: set[str]) -> set[str]:
    """Attributes the methods hand the token inputs to: ``self.model(input_ids, positions)``,
    ``self.language_model.model(inputs_embeds=...)``, ``routine(input_ids=..., language_model=
    self.model)``: the language backbone."""
    out: set[str] = set()
    for name in methods:
        func = release.func(key[0], f"{key[1]}.{name}")
        if func is not None:
            for call in func.calls:
                if call[0] == "feeds" and inputs & set(call[2].split(",")):
                    out.add(call[1])
    return out


def _sub_towers(
    release: Release,
    key: Key,
    methods: Iterable[str],
    backbone: set[str],
    skip: set[str],
    inputs: set[str],
) -> list[Key]:
    """Towers a hook reaches inside the language backbone: a sub-attribute it calls
    (``self.transformer.visual(...)``, Qwen-VL), or what a method of the backbone it calls
    runs (``self.model.get_encoder_outputs(...)`` -> ``self.encoder``, Whisper), short of the
    backbone's own language hooks and accessors (``skip``) and of what that method feeds the
    token inputs to."""
    out: list[Key] = []
    for name in methods:
        func = release.func(key[0], f"{key[1]}.{name}")
        if func is None:
            continue
        for call in func.calls:
            if call[0] != "selfattr" or call[1] not in backbone or not call[2]:
                continue
            for owner in _attr_classes(release, key, [call[1]]):
                if call[2] in release.attr_types(owner):
                    out.extend(_attr_classes(release, owner, [call[2]]))
                    continue
                hit = release.method(owner, call[2])
                if hit is None or call[2] in skip:
                    continue
                base = (hit[0], hit[1].partition(".")[0])
                reach = _method_closure(release, base, {call[2]}, skip)
                attrs = _attrs_called(release, base, reach) - _fed(release, base, reach, inputs)
                out.extend(_attr_classes(release, owner, sorted(attrs)))
    return out


def _text_roots(release: Release, marks: set[str]) -> set[Key]:
    """Classes with a generation mark (``lm_head``, ``compute_logits``), own or inherited."""
    out = set()
    for info in release.files.values():
        for cname in info.classes:
            key = (info.module, cname)
            names = set(release.attr_types(key))
            for base in release.mro(key):
                cls = release.cls(base)
                names |= set(cls.methods) if cls is not None else set()
            if names & marks:
                out.add(key)
    return out


def _text_side(
    release: Release, roots: set[Key], stop: set[Key], tower_words: set[str]
) -> dict[Key, str]:
    """Every text model of the release and what its constructors build: the classes with a
    generation mark that are no multimodal top-level class (``roots`` - ``stop``), and their
    constructor closure, short of the top-level classes, their subclasses and the declared
    towers (``stop``; a tower built inside ``_mark_tower_model`` may be a shared layer every
    text model builds too) and of the classes a tower word names (a VLM without hooks, sglang's
    Mllama, builds its ``MllamaVisionModel`` in its constructor). A class there is a language
    model's part, whichever VLM's hook reaches it."""
    fence = set(stop)
    for info in release.files.values():
        for cname in info.classes:
            if tower_words & set(_words(cname)):
                fence.add((info.module, cname))
    return _closure(release, dict.fromkeys(roots - fence, "text model"), fence)


_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _words(name: str) -> list[str]:
    """``Qwen2_5_VisionPatchEmbed`` -> [qwen, 2, 5, vision, patch, embed]; ``InternViT`` and
    ``MoonViT`` give ``vit``."""
    out = [w.lower() for w in _WORD.findall(name)]
    return out + ["vit" for w in out if w != "vit" and w.endswith("vit")]


def _descendants(release: Release, key: Key) -> set[Key]:
    out: set[Key] = set()
    todo = [key]
    while todo:
        for sub in release.subclasses.get(todo.pop(), []):
            if sub not in out:
                out.add(sub)
                todo.append(sub)
    return out


def _owners(
    release: Release,
    out: Sides,
    enc_start: dict[Key, str],
    declared: dict[Key, str],
    lang_hooks: set[str],
) -> dict[Key, set[str]]:
    """Classes without hooks that build a declared tower (transformers 4.4x models call
    ``self.visual(...)`` from forward; the tower declares ``main_input_name`` or a tower
    ``config_class``) are top-level too: their language attributes. A class reached only from
    some hook (a shared ``RMSNorm``) makes no top-level class of every class that builds it."""
    towers = set(_closure(release, dict(enc_start), set(out.top)))
    found: dict[Key, set[str]] = {}
    for info in release.files.values():
        for cname, cls in info.classes.items():
            key = (info.module, cname)
            if key in out.top or key in towers:
                continue
            enc_attrs = {
                attr
                for attr in cls.attrs
                if set(_attr_classes(release, key, [attr])) & set(declared)
            }
            if enc_attrs:
                out.top[key] = set()
                reach = _method_closure(release, key, lang_hooks, set())
                found[key] = _attrs_called(release, key, reach) - enc_attrs
    return found


def _generative(release: Release, tops: set[Key], marks: set[str]) -> set[Key]:
    """Top-level classes that generate text: they (or a base) have a generation mark (an
    ``lm_head``, ``compute_logits``), or a generating class builds them. A dual encoder's
    ``forward`` (SigLIP's text tower beside its vision tower) is no language side."""
    out = set()
    for key in tops:
        names = set(release.attr_types(key))
        for base in release.mro(key):
            cls = release.cls(base)
            names |= set(cls.methods) if cls is not None else set()
        if names & marks:
            out.add(key)
    grew = True
    while grew:
        grew = False
        for key in list(out):
            for hit in _attr_classes(release, key, release.attr_types(key)):
                if hit in tops and hit not in out:
                    out.add(hit)
                    grew = True
    return out


def sides(release: Release, seeds: dict[str, Any], hooks: set[str]) -> Sides:
    enc_ctx = set(seeds["tower_context"])
    lang_ctx = set(seeds["language_context"])
    lang_hooks = set(seeds["language_hooks"])
    interfaces = set(seeds["interfaces"])
    inputs = set(seeds["input_names"])
    config_suffixes = tuple(seeds["config_suffixes"])
    out = Sides()
    lang_inputs = set(seeds["language_inputs"])
    accessors = set(seeds["language_accessors"])
    enc_start: dict[Key, str] = {}
    lang_attrs_of: dict[Key, set[str]] = {}
    for info in release.files.values():
        for cname, cls in info.classes.items():
            key = (info.module, cname)
            own_hooks = set(cls.methods) & hooks
            derived = any(b.rpartition(".")[2] in interfaces for b in cls.bases)
            towers = {a for a, b in cls.attrs.items() if any(enc_ctx & set(w) for _, w in b)}
            consts = cls.consts
            if consts.get("main_input_name") in inputs or consts.get("config_class", "").endswith(
                config_suffixes
            ):
                enc_start[key] = "main_input_name" if "main_input_name" in consts else "config"
            if not (own_hooks or towers or (derived and cls.methods)):
                continue
            methods = _method_closure(release, key, own_hooks, lang_hooks)
            out.top[key] = methods
            langs = {a for a, b in cls.attrs.items() if any(lang_ctx & set(w) for _, w in b)}
            reach_lang = _method_closure(release, key, lang_hooks, methods)
            called = _attrs_called(release, key, reach_lang)
            # the language backbone: what forward and the embedding accessors feed input_ids /
            # positions to, or read (``get_embed_and_head``); a hook that touches it
            # (``self.model.embed_tokens.weight.dtype``) does not make it a tower
            access = _method_closure(release, key, accessors, methods)
            backbone = _fed(release, key, reach_lang | access, lang_inputs)
            backbone |= _attrs_read(release, key, access & accessors)
            # ... unless a hook calls it itself (Gemma3n's ``self.embed_vision(...)``, which
            # forward feeds vision token ids): a method on it (``get_input_embeddings``) or a
            # sub-module of it (``self.transformer.visual``, below) is not the whole of it
            backbone -= towers | _attrs_called(release, key, methods, whole=True)
            # a tower the hooks call is the encoder's even when forward calls it too (a dual
            # encoder); one they only read (``self.visual.dtype``) is not, when forward calls it
            enc_attrs = towers | (_attrs_called(release, key, methods) - backbone)
            enc_attrs |= _attrs_read(release, key, methods) - called - langs - backbone
            lang_attrs_of[key] = (langs | called | backbone) - enc_attrs
            for hit in _attr_classes(release, key, sorted(enc_attrs)):
                enc_start.setdefault(hit, f"{cname} tower")
            skip = lang_hooks | accessors
            for hit in _sub_towers(release, key, methods, backbone, skip, lang_inputs):
                enc_start.setdefault(hit, f"{cname} tower")
    marks = set(seeds["generation_marks"])
    roots = _text_roots(release, marks)
    declared = {k: v for k, v in enc_start.items() if v in ("main_input_name", "config")}
    # a class that declares an image input but builds a text model too (transformers'
    # BlipForConditionalGeneration, Kosmos2ForConditionalGeneration) is a whole VLM: a
    # top-level class (below, through the tower it builds), not a tower
    for key in list(declared):
        if set(_closure(release, {key: ""}, set())) & roots:
            del declared[key], enc_start[key]
    lang_attrs_of.update(_owners(release, out, enc_start, declared, lang_hooks))
    generating = _generative(release, set(out.top), marks)
    lang_start: dict[Key, str] = {}
    for key, attrs in lang_attrs_of.items():
        if key in generating:
            for hit in _attr_classes(release, key, sorted(attrs)):
                lang_start.setdefault(hit, f"{key[1]} language side")
    tops = set(out.top)
    encoder = _closure(release, enc_start, tops)
    # the language side does not run into the towers it holds (Qwen-VL's transformer.visual)
    language = _closure(release, lang_start, tops | set(enc_start))
    # a subclass of a multimodal model (Glm4vMoe of Glm4v) inherits its hooks: no text model
    heirs = {sub for key in tops for sub in _descendants(release, key)}
    words = set(seeds["tower_words"])
    text = _text_side(release, roots, tops | heirs | set(declared), words)
    out.shared = (set(encoder) & (set(language) | set(text))) | (set(encoder) & tops)
    out.encoder = {k: v for k, v in encoder.items() if k not in out.shared and k not in tops}
    out.language = {k: v for k, v in language.items() if k not in out.shared and k not in tops}
    # a model file, not a file of shared layers (layers/linear.py serves the towers too)
    mixed = {k[0] for k in (*encoder, *tops, *heirs, *declared, *out.shared)}
    out.text_modules = {k[0] for k in text if k in roots} - mixed
    return out
