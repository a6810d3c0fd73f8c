"""Which side of a model a traceback frame is: an encoder's code or the language model's, for a
multimodal model file (by the printed code line, then the line's span in the indexed releases,
then the function's name) and for a file of text models only (see ``code.frame_role``)."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import NamedTuple

from oomdoctor.knowledge import code_tables as tables


class _Mm(NamedTuple):
    role: str  # "e" encoder, "l" language side
    qualname: str
    why: str


def multimodal(module: str, engine: str, func: str, lineno: int | None, code: str) -> _Mm | None:
    variants = tables.mm_file(module)
    if not variants:
        return None
    owner, _, name = func.rpartition(".")
    spans = _by_line(variants, engine, name, owner, lineno) if lineno else None
    if code.strip() and _encoder_line(module, code):
        said = f"the code line occurs only in encoder methods of {module}"
        if spans is not None and spans.role == "e":
            return _Mm("e", spans.qualname, f"{said}; {spans.why}")
        return _Mm("e", name, f"{said} (in its indexed {engine} releases)")
    if spans is not None:
        return spans
    return _by_name(variants, engine, module, name, owner)


def text_model(module: str, engine: str, func: str) -> _Mm | None:
    """The language side for a forward of a text model's file (every class of it is a text
    model's part: no tower, no multimodal class)."""
    mask = tables.text_file(module)
    name = func.rsplit(".", 1)[-1]
    if not mask or not (name == "__call__" or name.startswith(("forward", "_forward"))):
        return None
    why = (
        f"{module} holds text models only ({tables.versions(engine, mask)}): its {name} is "
        "the language model's"
    )
    return _Mm("l", func, why)


def _encoder_line(module: str, code: str) -> bool:
    line = code.strip()
    if len(line) < int(tables.table("code_lines.json").get("min_line", 16)):
        return False
    digest = hashlib.blake2b(line.encode("utf-8"), digest_size=tables.hash_bytes()).digest()
    return digest in tables.line_hashes(module)


def _role_at(variant: tables.Variant, name: str, owner: str, lineno: int) -> tuple[str, str] | None:
    """(role, qualname) of the innermost class whose span holds the line and that has ``name``."""
    best: tuple[int, str, str] | None = None
    for layout, start, end in variant.classes:
        if not start <= lineno <= end or (owner and layout.cls != owner):
            continue
        if name not in layout.methods:
            continue
        role = layout.role
        if role == "t":
            offset, length = layout.encoder_methods.get(name, (-1, 0))
            inside = offset >= 0 and start + offset <= lineno <= start + offset + length
            role = "e" if inside else "l"
        if best is None or end - start < best[0]:
            best = (end - start, role, f"{layout.cls}.{name}")
    return None if best is None else (best[1], best[2])


def _by_line(
    variants: tuple[tables.Variant, ...], engine: str, name: str, owner: str, lineno: int
) -> _Mm | None:
    holding = 0  # releases whose file has a method of that name at that line
    votes: Counter[tuple[str, str]] = Counter()
    masks: dict[tuple[str, str], int] = {}
    for variant in variants:
        hit = _role_at(variant, name, owner, lineno)
        if hit is not None:
            count = variant.mask.bit_count()
            holding += count
            votes[hit] += count
            masks[hit] = masks.get(hit, 0) | variant.mask
    if not votes:
        return None
    by_role: Counter[str] = Counter()
    for (role, _), n in votes.items():
        by_role[role] += n
    role, n = by_role.most_common(1)[0]
    if 2 * n <= holding:
        return None  # the releases disagree on what that line is
    (best_role, qual), _ = max(((k, v) for k, v in votes.items() if k[0] == role), key=_count)
    side = "an encoder class" if best_role == "e" else "the language side"
    mask = 0
    for key, m in masks.items():
        if key[0] == role:
            mask |= m
    return _Mm(
        role,
        qual,
        f"line {lineno} is in {qual}, {side}, in {n} of the {holding} indexed releases "
        f"with a {name} there ({tables.versions(engine, mask)})",
    )


def _count(item: tuple[tuple[str, str], int]) -> int:
    return item[1]


def _by_name(
    variants: tuple[tables.Variant, ...], engine: str, module: str, name: str, owner: str
) -> _Mm | None:
    found: dict[tuple[str, str], int] = {}
    for variant in variants:
        for layout, _, _ in variant.classes:
            if name not in layout.methods or (owner and layout.cls != owner):
                continue
            role = layout.role
            if role == "t":
                role = "e" if name in layout.encoder_methods else "l"
            key = (role, f"{layout.cls}.{name}")
            found[key] = found.get(key, 0) | variant.mask
    roles = {role for role, _ in found}
    if len(roles) != 1:
        return None
    role = roles.pop()
    mask = 0
    for m in found.values():
        mask |= m
    quals = sorted({q for _, q in found})
    side = "encoder" if role == "e" else "language-side"
    where = quals[0] if len(quals) == 1 else f"{len(quals)} classes"
    return _Mm(
        role,
        quals[0] if len(quals) == 1 else name,
        f"every {name} of {module} is {side} ({where}; {tables.versions(engine, mask)})",
    )
