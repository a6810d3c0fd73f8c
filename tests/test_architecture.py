"""The shape of the package, checked: a package per pipeline stage, small modules, no import
cycle at module level, no mutable module-level state.

Imports are read from the source (ast), as Python runs them when a module loads: imports inside
functions and under ``if TYPE_CHECKING:`` do not count.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import oomdoctor

PACKAGE = Path(oomdoctor.__file__).resolve().parent
MAX_TOP_MODULES = 6
MAX_LINES = 400
#: Module-level state that forked scan workers need (set in each worker by its initialiser).
ALLOWED_STATE = {("oomdoctor.read.parallel", "_scanner")}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def test_at_most_six_top_level_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_every_stage_package_says_what_it_holds() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        tree = ast.parse(init.read_text("utf-8"))
        assert ast.get_docstring(tree), f"{init.relative_to(PACKAGE.parent)} has no docstring"


def test_no_module_over_400_lines() -> None:
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text("utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(name: str, path: Path) -> set[str]:
    """The oomdoctor modules a module imports when it loads."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if not _is_type_checking(node):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)

    visit(ast.parse(path.read_text("utf-8")).body)
    edges = set()
    for target in found:
        # `import a.b.c` also runs a and a.b: every enclosing package is a dependency too
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            candidate = ".".join(parts[:i])
            if candidate in MODULES and candidate != name:
                edges.add(candidate)
    return edges


def test_no_import_cycle_at_module_level() -> None:
    graph = {name: _load_time_imports(name, path) for name, path in MODULES.items()}
    # A package face importing its own submodules is how Python loads packages, not a cycle.
    for name in graph:
        graph[name] = {t for t in graph[name] if not (name.startswith(t + "."))}
    seen: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in seen:
                walk(nxt, stack)
        stack.pop()
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            walk(name, [])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_no_mutable_module_state() -> None:
    """Tables are read-only (tuples, frozensets, MappingProxyType): a run cannot leak into the
    next one (watch, tests, a library caller) through them."""
    found = []
    for module in pkgutil.walk_packages(oomdoctor.__path__, "oomdoctor."):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for key, value in vars(loaded).items():
            if key.startswith("__") or (module.name, key) in ALLOWED_STATE:
                continue
            if type(value) in (list, dict, set, bytearray):
                found.append(f"{module.name}.{key}: {type(value).__name__}")
    assert not found, found


def test_the_architecture_note_names_real_places() -> None:
    """Every path and module the note names exists, and it says where each kind of change
    goes first."""
    import re

    note = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text("utf-8")
    for kind in ("A new log format", "A new failure family", "A new engine", "A new report field"):
        assert f"**{kind}**" in note, kind
    named = set(re.findall(r"`((?:oomdoctor/)?[a-z_]+/(?:[a-z_]+(?:/|\.py|\.toml))?)`", note))
    assert len(named) > 20
    root = PACKAGE.parent
    # a path in the package (`budget/oom.py`) or in the repository (`rules/`, `tests/...`)
    missing = [r for r in named if not ((PACKAGE / r).exists() or (root / r).exists())]
    assert not missing, missing
