"""One source file, summarised with ``ast`` (never imported): its imports, classes, functions,
the calls each function makes, the attributes each class assigns, its messages and stage names.

The summary is plain data, so it is cached per file content (``FileInfo`` pickled under the
cache, keyed by the file's digest and this module's own digest).
"""

from __future__ import annotations

import ast
import hashlib
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

#: Calls that print or raise a message: ``logger.warning(...)``, ``warnings.warn(...)``.
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal",
     "info_once", "warning_once", "debug_once", "error_once"}
)  # fmt: skip
#: A ``%s``/``%d``/``%.2f``/``{...}`` placeholder: it splits a message into literal fragments.
PLACEHOLDER = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sdifgexr%]|\{[^{}]*\}")


@dataclass
class FuncInfo:
    qualname: str
    start: int
    end: int
    calls: list[tuple[str, ...]] = field(default_factory=list)
    #: ``self.X`` attributes read in the body (a tower passed as an argument counts).
    self_attrs: set[str] = field(default_factory=set)
    returns: str = ""  # the return annotation, as written
    #: Messages: (how, line, literal fragments in order).
    messages: list[tuple[str, int, tuple[str, ...]]] = field(default_factory=list)
    #: Indices into ``calls`` of the calls made inside a nested def or a lambda: they run when
    #: the closure is called (a factory returns it, a loop is handed it), not when this does.
    deferred: set[int] = field(default_factory=set)


@dataclass
class ClassInfo:
    name: str
    start: int
    end: int
    bases: list[str]
    methods: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: self.attr -> dotted names called to build it, with the ``with self.m(...)`` around it.
    attrs: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)
    #: Class-level ``name = "literal"`` or ``name = Name`` (main_input_name, config_class).
    consts: dict[str, str] = field(default_factory=dict)


@dataclass
class FileInfo:
    module: str  # dotted, e.g. vllm.model_executor.models.qwen2_5_vl
    path: str  # package-relative, e.g. vllm/model_executor/models/qwen2_5_vl.py
    ok: bool = True
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    functions: dict[str, FuncInfo] = field(default_factory=dict)
    #: (callee, stage name, factory) of ``...StageConfig(name=..., factory_path=...)`` calls,
    #: and ``model_stage="..."`` keywords and defaults.
    stages: list[tuple[str, str, str]] = field(default_factory=list)


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def fragments(
    node: ast.expr | None, assigned: dict[str, list[ast.expr]], depth: int = 0
) -> list[str]:
    """The literal text of a message expression, split at its placeholders."""
    if node is None or depth > 4:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return list(PLACEHOLDER.split(node.value))
    if isinstance(node, ast.JoinedStr):
        out: list[str] = [""]
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                pieces = PLACEHOLDER.split(value.value)
                out[-1] += pieces[0]
                out.extend(pieces[1:])
            else:
                out.append("")
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        left = fragments(node.left, assigned, depth + 1)
        if isinstance(node.op, ast.Mod):
            return left
        right = fragments(node.right, assigned, depth + 1)
        if left and right:
            return [*left[:-1], left[-1] + right[0], *right[1:]]
        return left or right
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return fragments(func.value, assigned, depth + 1)
        if isinstance(func, ast.Attribute) and func.attr == "join" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.List | ast.Tuple):
                out = []
                for elt in arg.elts:
                    out.extend(fragments(elt, assigned, depth + 1))
                return out
        for arg in node.args[:1]:  # SomeError(msg) inside a raise, str(x)
            return fragments(arg, assigned, depth + 1)
        return []
    if isinstance(node, ast.Name) and node.id in assigned:
        out = []
        for value in assigned[node.id]:
            out.extend(fragments(value, assigned, depth + 1))
        return out
    if isinstance(node, ast.Tuple | ast.List):
        out = []
        for elt in node.elts:
            out.extend(fragments(elt, assigned, depth + 1))
        return out
    return []


class _Body(ast.NodeVisitor):
    """Calls, self attributes and messages of one function body (nested defs included)."""

    def __init__(self, info: FuncInfo, cls: ClassInfo | None) -> None:
        self.info = info
        self.cls = cls
        self.assigned: dict[str, list[ast.expr]] = {}
        self.locals: dict[str, str] = {}
        #: local names that hold a class (``TpWorkerClass = TpModelWorkerClient``, a parameter
        #: ``executor_class: type[Executor]``, ``cls = Executor.get_class(cfg)``)
        self.kinds: dict[str, list[str]] = {}
        self.withs: list[str] = []
        self._nested = 0

    def _closure(self, node: ast.AST) -> None:
        start = len(self.info.calls)
        self._nested += 1
        self.generic_visit(node)
        self._nested -= 1
        self.info.deferred.update(range(start, len(self.info.calls)))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _closure

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assign(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assign(node.target, node.value)
        target = node.target
        # ``self.runner: GPUModelRunner = ...``, ``self.worker: Optional[WorkerBase] = None``
        if self.cls is not None and isinstance(target, ast.Attribute) and _is_self_attr(target):
            for ann in _annotated(node.annotation):
                self.cls.attrs.setdefault(target.attr, []).append((ann, tuple(self.withs)))
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.assigned.setdefault(node.target.id, []).append(node.value)
        self.generic_visit(node)

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
            if isinstance(value, ast.Call) and (name := dotted(value.func)):
                self.locals[target.id] = name
                if "." in name:  # ``Executor.get_class(cfg)``: a class the factory picks
                    self.kinds[target.id] = [name]
            elif names := _class_refs(value):
                self.kinds[target.id] = names
        elif self.cls is not None and _is_self_attr(target):
            attr = target.attr  # type: ignore[attr-defined]
            built = []
            for name in _built(value):
                built.extend(self.kinds.get(name, [name]))
            if isinstance(value, ast.Name) and value.id in self.locals:
                built.append(self.locals[value.id])  # ``w = Wrapper(...); self.worker = w``
            for name in built:
                self.cls.attrs.setdefault(attr, []).append((name, tuple(self.withs)))

    def visit_With(self, node: ast.With) -> None:
        names = []
        for item in node.items:
            ctx = item.context_expr
            if (
                isinstance(ctx, ast.Call)
                and isinstance(ctx.func, ast.Attribute)
                and isinstance(ctx.func.value, ast.Name)
                and ctx.func.value.id == "self"
            ):
                names.append(ctx.func.attr)
        self.withs.extend(names)
        self.generic_visit(node)
        del self.withs[len(self.withs) - len(names) :]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            self.info.self_attrs.add(node.attr)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        if node.exc is not None:
            self._message("raise", node.lineno, node.exc)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._message("assert", node.lineno, node.msg)
        self.generic_visit(node)

    def _message(self, how: str, line: int, expr: ast.expr) -> None:
        parts = tuple(p for p in (s.strip() for s in fragments(expr, self.assigned)) if p)
        if parts:
            self.info.messages.append((how, line, parts))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        calls = self.info.calls
        if isinstance(func, ast.Attribute):
            base = func.value
            if func.attr in LOG_METHODS and node.args:
                who = dotted(base) or ""
                if "log" in who.lower() or who in ("warnings", ""):
                    self._message(f"log.{func.attr}", node.lineno, node.args[0])
            if func.attr == "warn" and dotted(base) == "warnings" and node.args:
                self._message("warn", node.lineno, node.args[0])
            if isinstance(base, ast.Name) and base.id == "self":
                calls.append(("self", func.attr))
            elif _is_self_attr(base):
                calls.append(("selfattr", base.attr, func.attr))  # type: ignore[attr-defined]
            elif (
                isinstance(base, ast.Call)
                and isinstance(base.func, ast.Name)
                and base.func.id == "super"
            ):
                calls.append(("super", func.attr))
            elif isinstance(base, ast.Name) and base.id in self.locals:
                calls.append(("local", self.locals[base.id], func.attr))
            elif (name := dotted(base)) is not None:
                calls.append(("dotted", name, func.attr))
            if node.args and func.attr in ("collective_rpc", "_run_workers", "execute_method"):
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    calls.append(("rpc", first.value))
        elif isinstance(func, ast.Name):
            calls.append(("name", func.id))
        elif _is_self_attr(func):
            pass
        if _is_self_attr(func):
            calls.append(("selfattr", func.attr, ""))  # type: ignore[attr-defined]
        callee = (dotted(func) or "").rpartition(".")[2]
        passed = []
        for arg in [*node.args, *(kw.value for kw in node.keywords)]:
            values = arg.values if isinstance(arg, ast.Dict) else [arg]
            for value in values:
                if value is not None and _is_self_attr(value):
                    calls.append(("passes", callee, value.attr))  # type: ignore[attr-defined]
                    passed.append(value.attr)  # type: ignore[attr-defined]
        # the names a call hands over (``self.model(input_ids, positions=...)``): which self
        # attribute the forward feeds its token inputs to
        names = {kw.arg for kw in node.keywords if kw.arg}
        names |= {
            a.id for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Name)
        }
        root = _self_root(func)
        if names and (root or passed):
            for attr in dict.fromkeys([*([root] if root else []), *passed]):
                calls.append(("feeds", attr, ",".join(sorted(names))))
        self.generic_visit(node)


def _is_self_attr(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


#: Annotation wrappers whose argument is the attribute's class.
_WRAPPERS = frozenset({"Optional", "typing.Optional", "type", "Type", "typing.Type"})


def _annotated(node: ast.expr) -> list[str]:
    """The classes an annotation names: ``X``, ``Optional[X]``, ``X | None``."""
    if (name := dotted(node)) is not None:
        return [] if name == "None" else [name]
    if isinstance(node, ast.Subscript) and dotted(node.value) in _WRAPPERS:
        return _annotated(node.slice)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _annotated(node.left) + _annotated(node.right)
    return []


def _class_refs(value: ast.expr) -> list[str]:
    """Names a class-valued expression may hold: ``A``, ``mod.A``, ``A if c else B``."""
    if isinstance(value, ast.IfExp):
        return _class_refs(value.body) + _class_refs(value.orelse)
    name = dotted(value)
    return [name] if name is not None and name.rpartition(".")[2][:1].isupper() else []


def _self_root(node: ast.expr) -> str:
    """``a`` of a call on ``self.a``, ``self.a.b`` or ``self.a.b.c``; "" otherwise (a method of
    self itself, ``self.m()``, has no attribute root)."""
    chain: list[str] = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and len(chain) >= 2:
        return chain[-1]
    if isinstance(node, ast.Name) and node.id == "self" and len(chain) == 1:
        return chain[0]  # self.a(...): the attribute a itself is called (or a method a)
    return ""


def _built(value: ast.expr) -> list[str]:
    """Dotted names called anywhere in a value: ``A(...)``, ``A(...) if c else B(...)``,
    ``nn.ModuleList([Block(...) for _ in range(n)])``."""
    out = []
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and (name := dotted(node.func)) is not None:
            out.append(name)
    return out


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    if target:
        return f"{base}.{target}" if base else target
    return base


def summarise(source: str, module: str, path: str) -> FileInfo:
    """The summary of one file (``ok`` False when Python 3.11's ast cannot read it)."""
    info = FileInfo(module=module, path=path)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        info.ok = False
        return info
    is_package = path.endswith("__init__.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = (
                _resolve_relative(module, is_package, node.level, node.module)
                if node.level
                else node.module or ""
            )
            for alias in node.names:
                info.imports[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    info.imports[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    info.imports.setdefault(top, (top, None))
        elif isinstance(node, ast.Call):
            _stage_call(node, info)
        elif isinstance(node, ast.AnnAssign | ast.Assign):
            _stage_default(node, info)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            info.functions[node.name] = _function(node, node.name, None)
        elif isinstance(node, ast.ClassDef):
            _class(node, info)
    return info


def _function(
    node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, cls: ClassInfo | None
) -> FuncInfo:
    info = FuncInfo(qualname, node.lineno, node.end_lineno or node.lineno)
    if node.returns is not None:
        info.returns = ast.unparse(node.returns)
    visitor = _Body(info, cls)
    params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    for arg in params:
        ann = arg.annotation
        if isinstance(ann, ast.Subscript) and dotted(ann.value) in ("type", "Type", "typing.Type"):
            visitor.kinds[arg.arg] = _annotated(ann.slice)  # ``executor_class: type[Executor]``
    for stmt in node.body:
        visitor.visit(stmt)
    return info


def _class(node: ast.ClassDef, info: FileInfo) -> None:
    bases = [b for b in (dotted(base) for base in node.bases) if b]
    cls = ClassInfo(node.name, node.lineno, node.end_lineno or node.lineno, bases)
    info.classes[node.name] = cls
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
            cls.methods[stmt.name] = (start, stmt.end_lineno or stmt.lineno)
            qual = f"{node.name}.{stmt.name}"
            info.functions[qual] = _function(stmt, qual, cls)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            if isinstance(stmt, ast.AnnAssign) and value is None:
                ann = dotted(stmt.annotation)
                if isinstance(stmt.target, ast.Name) and stmt.target.id == "config" and ann:
                    cls.consts.setdefault("config_class", ann)  # ``config: XVisionConfig``
            for target in targets:
                if isinstance(target, ast.Name) and value is not None:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        cls.consts[target.id] = value.value
                    elif (name := dotted(value)) is not None:
                        cls.consts[target.id] = name


def _stage_call(node: ast.Call, info: FileInfo) -> None:
    callee = dotted(node.func) or ""
    kws = {
        kw.arg: kw.value.value
        for kw in node.keywords
        if kw.arg and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)
    }
    factory = ""
    for kw in node.keywords:
        if kw.arg == "factory_path":
            factory = "".join(fragments(kw.value, {}))
    if callee.endswith("StageConfig") and "name" in kws:
        info.stages.append((callee, kws["name"], factory))
    if "model_stage" in kws:
        info.stages.append(("model_stage", kws["model_stage"], callee))


def _stage_default(node: ast.Assign | ast.AnnAssign, info: FileInfo) -> None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    value = node.value
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return
    for target in targets:
        name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
        if name == "model_stage":
            info.stages.append(("model_stage", value.value, "default"))


def digest_of(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()


def cached(cache: Path, source: bytes, module: str, path: str) -> FileInfo:
    """``summarise``, through a pickle cache keyed by content and this module's source."""
    key = hashlib.sha1(source + _SELF + module.encode() + path.encode()).hexdigest()
    store = cache / "index" / key[:2] / f"{key}.pickle"
    if store.is_file():
        try:
            loaded = pickle.loads(store.read_bytes())
            if isinstance(loaded, FileInfo):
                return loaded
        except Exception:  # a torn cache file is rebuilt
            pass
    info = summarise(source.decode("utf-8", "replace"), module, path)
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(pickle.dumps(info, protocol=pickle.HIGHEST_PROTOCOL))
    return info


_SELF = Path(__file__).read_bytes()
