"""Table b: functions by site and phase, from the seeds expanded over a static call graph.

Edges of a function: ``self.m()`` (the method on the class or its nearest base, and the
overrides in its subclasses), module functions and classes called by name (a class means its
``__init__``), ``mod.f()`` through imports, ``self.attr.m()`` where a method of the class assigns
``self.attr = C(...)``, ``x.m()`` where ``x = C(...)`` in the same body, ``self.prop.m()`` through the attributes a
property returns, ``super().m()``, and
``collective_rpc("m")`` / ``_run_workers("m")`` / ``execute_method("m")`` to the methods ``m`` of
the worker classes (classes in a module whose path names a worker), and, for sites only, a method
handed to a spawner (``threading.Thread(target=self.m)``) and the calls inside a nested def
or lambda (phases do not follow them: a factory that builds a stage's closures runs at start-up,
the closures while serving).

Expansion of one role's seeds does not enter a seed of another role of the same kind; a
function reached from two roles gets neither (a seed keeps its own).
"""

from __future__ import annotations

import fnmatch
from collections import deque
from collections.abc import Iterable, Iterator

from tools.gen_knowledge.release import Release

Node = tuple[str, str]  # (module, qualname)


class Graph:
    def __init__(self, release: Release, spawners: Iterable[str] = ()) -> None:
        self.r = release
        #: Calls that run a method handed to them (``threading.Thread(target=self.loop)``,
        #: ``executor.submit(self.load)``); followed while ``spawn`` is on (sites: a thread a
        #: loader starts loads), not for phases (a thread outlives the constructor that starts
        #: it: its phase is its own)
        self.spawners = frozenset(spawners)
        self.spawn = False
        self._workers: dict[str, list[Node]] = {}
        self._subs: dict[Node, list[Node]] = {}
        for info in release.files.values():
            if "worker" not in info.path:
                continue
            for cname, cls in info.classes.items():
                for m in cls.methods:
                    self._workers.setdefault(m, []).append((info.module, f"{cname}.{m}"))

    def seeds(self, patterns: Iterable[str]) -> set[Node]:
        pats = list(patterns)
        out = set()
        for info in self.r.files.values():
            for qual in info.functions:
                if any(fnmatch.fnmatchcase(qual, p) for p in pats):
                    out.add((info.module, qual))
        return out

    def _descendants(self, key: Node) -> list[Node]:
        if key not in self._subs:
            out, todo, seen = [], [key], {key}
            while todo:
                for sub in self.r.subclasses.get(todo.pop(), []):
                    if sub not in seen:
                        seen.add(sub)
                        out.append(sub)
                        todo.append(sub)
            self._subs[key] = out
        return self._subs[key]

    def _on(self, key: Node, name: str, down: bool) -> Iterator[Node]:
        hit = self.r.method(key, name)
        if hit is not None:
            yield hit
        if down:
            for sub in self._descendants(key):
                cls = self.r.cls(sub)
                if cls is not None and name in cls.methods:
                    yield sub[0], f"{sub[1]}.{name}"

    def edges(self, node: Node) -> Iterator[Node]:
        module, qual = node
        info = self.r.modules.get(module)
        func = info.functions.get(qual) if info is not None else None
        if info is None or func is None:
            return
        owner = qual.partition(".")[0] if "." in qual else None
        key = (module, owner) if owner and owner in info.classes else None
        types = self.r.attr_types(key) if key is not None else {}
        for index, call in enumerate(func.calls):
            if index in func.deferred and not self.spawn:
                continue  # a closure's calls run when it is called: no phase flows into them
            kind = call[0]
            if kind == "self" and key is not None:
                yield from self._on(key, call[1], down=True)
            elif kind == "selfattr" and key is not None:
                for built, _ in self._typed(key, types, call[1], call[2]):
                    bmod, _, bname = built.partition("|")
                    for cls in self.r.built_classes(bmod, bname, key):
                        for name in (call[2],) if call[2] else ("forward", "__call__"):
                            yield from self._on(cls, name, down=False)
            elif kind == "name":
                yield from self._named(info, call[1])
            elif kind == "dotted":
                yield from self._named(info, f"{call[1]}.{call[2]}")
                target = self.r.resolve(info, call[1])
                if target is not None and self.r.cls(target) is not None:
                    yield from self._on(target, call[2], down=False)
            elif kind == "super" and key is not None:
                for base in list(self.r.mro(key))[1:]:
                    found = self.r.cls(base)
                    if found is not None and call[1] in found.methods:
                        yield base[0], f"{base[1]}.{call[1]}"
                        break
            elif kind == "local":
                for cls in self.r.built_classes(module, call[1]):
                    yield from self._on(cls, call[2], down=False)
            elif kind == "rpc":
                yield from self._workers.get(call[1], [])
            elif kind == "passes" and self.spawn and key is not None and call[1] in self.spawners:
                yield from self._on(key, call[2], down=True)

    def _typed(
        self,
        key: Node,
        types: dict[str, list[tuple[str, tuple[str, ...]]]],
        attr: str,
        method: str,
    ) -> list[tuple[str, tuple[str, ...]]]:
        """What ``self.attr`` was built as; for ``self.attr.m()`` on a property (sglang's
        ``model_worker`` returns ``self.draft_worker`` or ``self.tp_worker``), what the
        attributes the property reads were built as."""
        if attr in types or not method:
            return types.get(attr, [])
        hit = self.r.method(key, attr)
        func = self.r.func(*hit) if hit is not None else None
        if func is None:
            return []
        return [b for a in sorted(func.self_attrs) for b in types.get(a, [])]

    def _named(self, info: object, name: str) -> Iterator[Node]:
        target = self.r.resolve(info, name)  # type: ignore[arg-type]
        if target is None:
            return
        owner = self.r.modules[target[0]]
        if target[1] in owner.functions:
            yield target
        elif target[1] in owner.classes:
            hit = self.r.method(target, "__init__")
            if hit is not None:
                yield hit

    def reach(self, seeds: set[Node], stop: set[Node], depth: int) -> set[Node]:
        """Functions within ``depth`` calls of the seeds, not entering ``stop``."""
        seen = set(seeds)
        todo = deque((node, 0) for node in seeds)
        while todo:
            node, level = todo.popleft()
            if level >= depth:
                continue
            for nxt in self.edges(node):
                if nxt not in seen and nxt not in stop:
                    seen.add(nxt)
                    todo.append((nxt, level + 1))
        return seen


def assign(
    graph: Graph,
    roles: dict[str, list[str]],
    depth: int,
    flat: Iterable[str] = (),
    neutral: Iterable[str] = (),
) -> tuple[dict[Node, str | None], dict[str, int]]:
    """Each reached function's role (None where two roles reach it); matched seeds per role.
    A ``flat`` role labels its seeds only: they are not expanded, and no other role's
    expansion enters them. ``neutral`` functions (dispatchers that run the method they are
    named) get no role and no expansion enters them: their callers' rpc edges go on."""
    seeds = {role: graph.seeds(patterns) for role, patterns in roles.items()}
    every = set().union(*seeds.values()) if seeds else set()
    every |= graph.seeds(neutral)
    level = set(flat)
    reached: dict[Node, set[str]] = {}
    for role, nodes in seeds.items():
        found = nodes if role in level else graph.reach(nodes, every - nodes, depth)
        for node in found:
            reached.setdefault(node, set()).add(role)
    out: dict[Node, str | None] = {}
    for node, names in reached.items():
        own = [role for role, nodes in seeds.items() if node in nodes]
        if len(own) == 1:
            out[node] = own[0]
        else:
            out[node] = next(iter(names)) if len(names) == 1 and not own else None
    return out, {role: len(nodes) for role, nodes in seeds.items()}
