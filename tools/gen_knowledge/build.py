"""Every table, from every release the seeds name: index each release, derive, merge.

A release's contribution is keyed by its bit in the engine's release list (``mask``), so a row
says which releases it holds in; identical files of several releases are stored once.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.gen_knowledge import callgraph, encoders, fetch, messages, stages
from tools.gen_knowledge.release import Release, load

Json = dict[str, Any]
#: The phase of the dispatch loops and process entry points (seeds.toml): both phases' work.
EITHER = "either"
#: Shortest code line whose hash is kept: shorter lines (``return x``) are everywhere.
MIN_CODE_LINE = 20
#: Bytes of a code line's hash: within one file's few hundred lines, 3 bytes do not collide.
LINE_HASH_BYTES = 3
#: transformers' files are not forked and shifted the way the engines' are: its line numbers
#: decide, and its hashes would cost a third of the table.
NO_LINE_HASHES = ("transformers/",)


def line_hash(line: str) -> bytes:
    """The short hash of a stripped code line (oomdoctor.knowledge.code computes the same)."""
    return hashlib.blake2b(line.strip().encode("utf-8"), digest_size=LINE_HASH_BYTES).digest()


@dataclass
class Tables:
    releases: dict[str, list[str]] = field(default_factory=dict)
    sources: dict[str, list[Json]] = field(default_factory=dict)
    mm: dict[str, dict[str, list[Any]]] = field(
        default_factory=dict
    )  # path -> digest -> [mask, rows]
    tops: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # path -> class -> methods
    enc_lines: dict[str, set[bytes]] = field(default_factory=dict)
    other_lines: dict[str, set[bytes]] = field(default_factory=dict)
    functions: dict[str, dict[str, dict[str, dict[tuple[str, str], int]]]] = field(
        default_factory=dict
    )  # engine -> path -> qualname -> (site, phase) -> mask
    messages: dict[tuple[str, tuple[str, ...], str, str, str], int] = field(default_factory=dict)
    stages: dict[str, Json] = field(default_factory=dict)
    seeds_matched: dict[str, dict[str, int]] = field(default_factory=dict)
    seed_hits: dict[str, int] = field(default_factory=dict)  # seed -> releases defining it
    #: Files holding text models' classes only (no tower, no multimodal class) -> mask.
    text_files: dict[str, int] = field(default_factory=dict)
    #: Classes named *Vision* in a multimodal file that are not encoder classes, and why.
    vision_other: dict[tuple[str, str, str], int] = field(default_factory=dict)
    unparsed: dict[str, int] = field(default_factory=dict)


def build(seeds: Json, cache: Path, only: Iterable[str] = ()) -> Tables:
    tables = Tables()
    wanted = set(only)
    pattern = re.compile(seeds["messages"]["pattern"])
    min_fragment = int(seeds["messages"]["min_fragment"])
    for entry in seeds["release"]:
        engine = entry["engine"]
        if wanted and engine not in wanted:
            continue
        tables.releases[engine] = list(entry["versions"])
        for bit, version in enumerate(entry["versions"]):
            print(f"gen-knowledge: {engine} {version}", file=sys.stderr, flush=True)
            tree, sha = fetch.unpacked(cache, engine, version)
            archive = fetch.sdist(cache, engine, version)
            tables.sources.setdefault(engine, []).append(
                {"version": version, "file": archive.name, "sha256": sha}
            )
            release = load(cache, engine, version, tree, sha, entry["package"], entry.get("files"))
            bad = sum(not info.ok for info in release.files.values())
            if bad:
                tables.unparsed[f"{engine} {version}"] = bad
            mask = 1 << bit
            _multimodal(tables, release, seeds["encoder"], mask)
            if engine != "transformers":
                _functions(tables, release, seeds, mask)
                for frags, how, path, qual in messages.messages(release, pattern, min_fragment):
                    key = (engine, frags, how, path, qual)
                    tables.messages[key] = tables.messages.get(key, 0) | mask
            if engine.endswith("omni"):
                _stages(tables, release, seeds["stages"], mask)
    return tables


def _multimodal(tables: Tables, release: Release, seeds: Json, mask: int) -> None:
    hooks = encoders.hook_names(release, seeds)
    found = encoders.sides(release, seeds, hooks)
    for module in found.text_modules:
        path = release.modules[module].path
        tables.text_files[path] = tables.text_files.get(path, 0) | mask
    by_file: dict[str, dict[str, tuple[str, Any]]] = {}
    for (module, cname), via in found.encoder.items():
        by_file.setdefault(module, {})[cname] = ("e", via)
    for (module, cname), via in found.language.items():
        if module in by_file:  # the language side matters only beside an encoder
            by_file[module][cname] = ("l", via)
    for (module, cname), methods in found.top.items():
        by_file.setdefault(module, {})[cname] = ("t", methods)
    for module, classes in by_file.items():
        info = release.modules[module]
        if not any(role == "e" or (role == "t" and extra) for role, extra in classes.values()):
            continue
        for cname in info.classes:
            if "Vision" in cname and classes.get(cname, ("", ""))[0] != "e":
                role = classes.get(cname, ("", ""))[0]
                why = {"l": "language side", "t": "top-level model"}.get(role, "")
                if not why:
                    shared = (module, cname) in found.shared
                    why = "built by both sides" if shared else "no hook or tower reaches it"
                key = (info.path, cname, why)
                tables.vision_other[key] = tables.vision_other.get(key, 0) | mask
        rows: list[tuple[tuple[str, str, str, str], int, int]] = []
        enc_spans: list[tuple[int, int]] = []
        for cname, (role, extra) in sorted(classes.items()):
            cls = info.classes[cname]
            names = []
            for name, (start, end) in sorted(cls.methods.items(), key=lambda kv: kv[1]):
                if name == "__init__" and not (role == "t" and name in extra):
                    continue  # it builds the model (at load): neither side's work
                if role == "t" and name in extra:
                    names.append(f"{name}@{start - cls.start}+{end - start}")
                    enc_spans.append((start, end))
                elif role == "t":  # listed once per file (tops), not in every variant
                    tables.tops.setdefault(info.path, {}).setdefault(cname, set()).add(name)
                else:
                    names.append(name)
            if role == "e":  # a frame in a tower's __init__ is weight loading, not the encoder
                enc_spans.extend(span for m, span in cls.methods.items() if m != "__init__")
            # how a class was found (its top-level class, =main_input_name) stays out: the
            # lookup does not read it, and it cost 4% of the tables
            rows.append(((cname, role, ",".join(names), ""), cls.start, cls.end))
        variants = tables.mm.setdefault(info.path, {})
        digest = hashlib.sha1(repr(rows).encode()).hexdigest()
        if digest in variants:
            variants[digest][0] |= mask
        else:
            variants[digest] = [mask, rows]
        _lines(tables, info.path, release.source(info.path), enc_spans)


def _lines(tables: Tables, path: str, source: str, spans: list[tuple[int, int]]) -> None:
    inside: set[int] = set()
    for start, end in spans:
        inside.update(range(start, end + 1))
    enc = tables.enc_lines.setdefault(path, set())
    other = tables.other_lines.setdefault(path, set())
    for number, line in enumerate(source.splitlines(), start=1):
        text = line.strip()
        if len(text) < MIN_CODE_LINE or text.startswith("#"):
            continue
        (enc if number in inside else other).add(line_hash(text))


def _functions(tables: Tables, release: Release, seeds: Json, mask: int) -> None:
    graph = callgraph.Graph(release, seeds["graph"]["spawners"])
    depth = int(seeds["graph"]["depth"])
    site_seeds = _role_seeds(seeds["site"], "site", release.engine)
    phase_seeds = _role_seeds(seeds["phase"], "phase", release.engine)
    graph.spawn = True
    neutral = seeds["graph"].get("dispatchers", [])
    sites, s_counts = callgraph.assign(graph, site_seeds, depth, neutral=neutral)
    graph.spawn = False
    phases, p_counts = callgraph.assign(graph, phase_seeds, depth, flat=[EITHER], neutral=neutral)
    key = f"{release.engine} {release.version}"
    tables.seeds_matched[key] = {**s_counts, **p_counts}
    quals = {qual for info in release.files.values() for qual in info.functions}
    for pattern in {
        *(x for v in site_seeds.values() for x in v),
        *(x for v in phase_seeds.values() for x in v),
    }:
        hit = (
            pattern in quals
            if not any(c in pattern for c in "*?[")
            else bool(fnmatch.filter(quals, pattern))
        )
        tables.seed_hits[pattern] = tables.seed_hits.get(pattern, 0) + int(hit)
    per_engine = tables.functions.setdefault(release.engine, {})
    for node in set(sites) | set(phases):
        site, phase = sites.get(node), phases.get(node)
        if site is None and phase is None:
            continue
        path = release.modules[node[0]].path
        row = per_engine.setdefault(path, {}).setdefault(node[1], {})
        label = (site or "", phase or "")
        row[label] = row.get(label, 0) | mask


def _role_seeds(entries: list[Json], kind: str, engine: str) -> dict[str, list[str]]:
    """Role -> seed patterns for one engine (an entry with ``engines`` applies to those only)."""
    out: dict[str, list[str]] = {}
    for entry in entries:
        if engine in entry.get("engines", [engine]):
            out.setdefault(entry[kind], []).extend(entry["seeds"])
    return out


def _stages(tables: Tables, release: Release, vocab: Json, mask: int) -> None:
    for name, factory, path in stages.stage_names(release):
        row = tables.stages.setdefault(
            name, {"kind": stages.kind(name, factory, vocab), "factory": factory, "file": path}
        )
        if row["kind"] == "other" and factory:
            row["kind"] = stages.kind(name, factory, vocab)
            row["factory"] = factory
        masks = row.setdefault("releases", {})
        masks[release.engine] = masks.get(release.engine, 0) | mask


SITE_CODES = {
    "weights": "w", "kv_pool": "k", "resume": "r", "graph_capture": "g", "encoder": "e",
    "logits": "l", "sampling": "s", "comm": "c", "forward": "f", "": "-",
}  # fmt: skip
PHASE_CODES = {"startup": "s", "running": "r", EITHER: "x", "": "-"}
HOW_CODES = {"raise": "r", "assert": "a", "warn": "w", "log": "l"}


def _mm_json(variants: dict[str, list[Any]], tops: dict[str, set[str]]) -> Json:
    layouts: dict[tuple[str, str, str, str], int] = {}
    rows = []
    for mask, classes in sorted(variants.values(), key=lambda v: v[0]):
        spans = []
        for layout, start, end in classes:
            index = layouts.setdefault(layout, len(layouts))
            spans.append(f"{index}:{start}:{end}")
        rows.append([mask, ";".join(spans)])
    out: Json = {"k": [list(layout) for layout in layouts], "v": rows}
    if tops:  # the other methods of the top-level classes (language side), in any release
        out["t"] = {cls: ",".join(sorted(names)) for cls, names in sorted(tops.items())}
    return out


def _text_json(files: dict[str, int]) -> dict[str, str]:
    """Text models' files: directory -> ``name:mask,...`` (``name`` without ``.py``;
    transformers' ``llama/modeling_llama.py`` is ``=``)."""
    out: dict[str, list[str]] = {}
    for path, mask in sorted(files.items()):
        folder, _, name = path.rpartition("/")
        name = name.removesuffix(".py")
        if name == f"modeling_{folder.rpartition('/')[2]}":
            name = "="
        out.setdefault(folder, []).append(f"{name}:{mask:x}")
    return {folder: ",".join(items) for folder, items in out.items()}


def patterns(seeds: Json) -> dict[str, str]:
    """Class-agnostic site seeds (``*.load_weights``): the lookup applies them by name, so the
    table need not list every model class's method."""
    out = {}
    for entry in seeds["site"]:
        for seed in entry["seeds"]:
            if seed.startswith("*.") and not any(c in seed[2:] for c in "*?["):
                out[seed[2:]] = entry["site"]
    return out


def _functions_json(tables: Tables, by_name: dict[str, str]) -> dict[str, dict[str, str]]:
    """path -> class ("" for module functions) -> ``method=<site><phase><mask hex>;...``."""
    out: dict[str, dict[str, str]] = {}
    for paths in tables.functions.values():
        for path, quals in paths.items():
            groups: dict[str, list[str]] = {}
            for qual, labels in sorted(quals.items()):
                owner, _, last = qual.rpartition(".")
                if set(labels) == {(by_name.get(last, "?"), "")}:
                    continue  # what the pattern says anyway
                codes = "|".join(
                    f"{SITE_CODES[site]}{PHASE_CODES[phase]}{m:x}"
                    for (site, phase), m in sorted(labels.items())
                )
                groups.setdefault(owner, []).append(f"{last}={codes}")
            if groups:
                out[path] = {owner: ";".join(items) for owner, items in sorted(groups.items())}
    return dict(sorted(out.items()))


def to_json(tables: Tables, seeds: Json) -> dict[str, Json]:
    """The tables as the lookup module reads them."""
    hashes = {}
    for path, enc in tables.enc_lines.items():
        if path.startswith(NO_LINE_HASHES):
            continue
        unique = sorted(enc - tables.other_lines.get(path, set()))
        if unique:
            hashes[path] = base64.b64encode(b"".join(unique)).decode("ascii")
    mm = {
        path: _mm_json(variants, tables.tops.get(path, {}))
        for path, variants in sorted(tables.mm.items())
    }
    by_name = patterns(seeds)
    msgs: dict[str, list[list[Any]]] = {}
    least = int(seeds["messages"]["min_fragment"])
    for (_engine, frags, how, path, qual), m in sorted(tables.messages.items()):
        kept = [f for f in frags if len(f) >= least]  # the lookup matches only these
        msgs.setdefault(path, []).append([qual, HOW_CODES[how.partition(".")[0]], m, *kept])
    releases = dict(sorted(tables.releases.items()))
    return {
        "multimodal.json": {
            "releases": releases,
            "files": mm,
            "text": _text_json(tables.text_files),
        },
        "code_lines.json": {
            "hash_bytes": LINE_HASH_BYTES,
            "min_line": MIN_CODE_LINE,
            "hashes": dict(sorted(hashes.items())),
        },
        "functions.json": {
            "releases": releases,
            "patterns": by_name,
            "functions": _functions_json(tables, by_name),
        },
        "messages.json": {
            "releases": releases,
            "min_fragment": int(seeds["messages"]["min_fragment"]),
            "messages": dict(sorted(msgs.items())),
        },
        "stages.json": {
            "releases": releases,
            "vocabulary": {k: v for k, v in seeds["stages"].items() if k != "why"},
            "stages": dict(sorted(tables.stages.items())),
        },
    }
