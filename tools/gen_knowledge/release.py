"""A release's package, indexed: every source file summarised (index.FileInfo), and the
name resolution the call graph and the encoder search share."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tools.gen_knowledge.index import ClassInfo, FileInfo, FuncInfo, cached

SKIP_DIRS = frozenset({"test", "tests", "benchmarks", "benchmark", "examples", "__pycache__"})


@dataclass
class Release:
    engine: str
    version: str
    sha256: str
    files: dict[str, FileInfo]  # package-relative path -> summary
    root: Path
    modules: dict[str, FileInfo] = field(default_factory=dict)  # dotted -> summary
    subclasses: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.modules = {info.module: info for info in self.files.values()}
        for info in self.files.values():
            for cls in info.classes.values():
                for base in cls.bases:
                    target = self.resolve(info, base)
                    if target is not None and target[1] in self.modules[target[0]].classes:
                        self.subclasses.setdefault(target, []).append((info.module, cls.name))

    def source(self, path: str) -> str:
        return (self.root / path).read_text("utf-8", "replace")

    def resolve(self, info: FileInfo, name: str, depth: int = 0) -> tuple[str, str] | None:
        """(module, top-level name) that ``name`` (maybe dotted) means in ``info``, when it is a
        class or function of this release."""
        if depth > 4:
            return None
        head, _, rest = name.partition(".")
        if not rest:
            if head in info.classes or head in info.functions:
                return info.module, head
            if head in info.imports:
                module, attr = info.imports[head]
                if attr is None:
                    return None
                return self._in_module(module, attr, depth)
            return None
        # a.b.C: a module alias then a name in it
        if head in info.imports:
            module, attr = info.imports[head]
            base = module if attr is None else f"{module}.{attr}"
            parts = rest.split(".")
            return self._in_module(".".join([base, *parts[:-1]]), parts[-1], depth)
        return None

    def _in_module(self, module: str, attr: str, depth: int) -> tuple[str, str] | None:
        target = self.modules.get(module)
        if target is None:
            return None
        if attr in target.classes or attr in target.functions:
            return module, attr
        if attr in target.imports:
            return self.resolve(target, attr, depth + 1)
        return None

    def cls(self, key: tuple[str, str]) -> ClassInfo | None:
        info = self.modules.get(key[0])
        return None if info is None else info.classes.get(key[1])

    def mro(self, key: tuple[str, str], depth: int = 0) -> Iterator[tuple[str, str]]:
        """The class and its bases found in this release, nearest first."""
        cls = self.cls(key)
        if cls is None or depth > 8:
            return
        yield key
        info = self.modules[key[0]]
        for base in cls.bases:
            target = self.resolve(info, base)
            if target is not None:
                yield from self.mro(target, depth + 1)

    def method(self, key: tuple[str, str], name: str) -> tuple[str, str] | None:
        """(module, "Class.method") of ``name`` on the class or its nearest base."""
        for module, cname in self.mro(key):
            cls = self.modules[module].classes[cname]
            if name in cls.methods:
                return module, f"{cname}.{name}"
        return None

    def attr_types(self, key: tuple[str, str]) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
        out: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for module, cname in reversed(list(self.mro(key))):
            for attr, built in self.modules[module].classes[cname].attrs.items():
                out[attr] = [*out.get(attr, []), *((f"{module}|{n}", w) for n, w in built)]
        return out

    def built_classes(
        self, module: str, name: str, owner: tuple[str, str] | None = None
    ) -> list[tuple[str, str]]:
        """Classes a called name means in ``module``: a class, a class's factory classmethod
        (``C._from_config``), or the classes a factory function of this release constructs;
        ``self.m`` (``self.model = self._init_model(...)``) is the method ``m`` of ``owner`` as
        a factory."""
        info = self.modules.get(module)
        if info is None:
            return []
        if name.startswith("self.") and owner is not None:
            hit = self.method(owner, name[5:])
            func = self.func(*hit) if hit is not None else None
            if hit is None or func is None:
                return []
            return self._constructed(self.modules[hit[0]], func)
        target = self.resolve(info, name)
        if target is None and "." in name:
            target = self.resolve(info, name.rsplit(".", 1)[0])
        if target is None:
            return []
        home = self.modules[target[0]]
        if target[1] in home.classes:
            return [target]
        func = home.functions.get(target[1])
        if func is None:
            return []
        return self._constructed(home, func)

    def _constructed(self, owner: FileInfo, func: FuncInfo) -> list[tuple[str, str]]:
        out = []
        for call in func.calls:
            if call[0] == "name":
                hit = self.resolve(owner, call[1])
                if hit is not None and hit[1] in self.modules[hit[0]].classes:
                    out.append(hit)
        return out

    def func(self, module: str, qualname: str) -> FuncInfo | None:
        info = self.modules.get(module)
        return None if info is None else info.functions.get(qualname)


def _walk(root: Path, package: str, pattern: re.Pattern[str] | None) -> Iterator[tuple[Path, str]]:
    base = root / package
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if pattern is None or pattern.search(rel):
                yield full, rel


def _package_root(tree: Path, package: str) -> Path:
    for candidate in (tree, tree / "src", tree / "python"):
        if (candidate / package / "__init__.py").is_file():
            return candidate
    for init in sorted(tree.rglob(f"{package}/__init__.py"), key=lambda p: len(p.parts)):
        return init.parent.parent
    raise FileNotFoundError(f"{tree}: no {package}/__init__.py")


def _one(args: tuple[str, str, str, str]) -> FileInfo:
    cache, full, module, rel = args
    return cached(Path(cache), Path(full).read_bytes(), module, rel)


def load(
    cache: Path, engine: str, version: str, tree: Path, sha: str, package: str, files: str | None
) -> Release:
    root = _package_root(tree, package)
    pattern = re.compile(files) if files else None
    jobs = []
    for full, rel in _walk(root, package, pattern):
        module = rel[:-3].replace("/", ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        jobs.append((str(cache), str(full), module, rel))
    with ProcessPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        infos = list(pool.map(_one, jobs, chunksize=64))
    return Release(engine, version, sha, {i.path: i for i in infos}, root)
