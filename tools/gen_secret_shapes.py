"""Build the token-prefix table the redactor loads (oomdoctor/report/token_prefixes.json).

Two steps, so the table can be checked without detect-secrets installed:

1. ``--from DIR`` (DIR: an unpacked ``detect_secrets`` package, e.g. from
   ``pip download --no-deps detect-secrets==1.5.0``) reads its plugin sources with ``ast`` (nothing
   of it is imported or run) and records every detector's ``denylist`` regexes in
   ``tools/secret_shapes/detect-secrets.json``.
2. Always: the recorded patterns plus ``tools/secret_shapes/overrides.toml`` become the table.
   A pattern is taken when it starts with a literal of at least two characters (a token prefix:
   ``ghp_``, ``SG.``, ``xox…``); a pattern without one is a context pattern (``aws … key = …``),
   which the redactor's structural shapes cover (key = value, URL userinfo, PEM blocks). Every
   open repeat is capped (``+`` → ``{1,256}``) so a hostile line costs linear time; a pattern
   that keeps an open repeat is skipped. The overrides skip detectors with a reason and add the
   prefixes detect-secrets lacks, each with its source.

``tests/test_secret_shapes.py`` checks that the checked-in table is what step 2 gives.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    from re import _parser as sre_parse  # the parser behind ``re``

    import tomllib
else:  # pragma: no cover - Python 3.10
    import sre_parse

    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tools" / "secret_shapes" / "detect-secrets.json"
OVERRIDES = ROOT / "tools" / "secret_shapes" / "overrides.toml"
TABLE = ROOT / "oomdoctor" / "report" / "token_prefixes.json"
#: The longest run a capped repeat may take: longer than any real token.
CAP = 256


# -- step 1: read the plugin sources --------------------------------------------------------


def _value(node: ast.expr, names: dict[str, str]) -> str | None:
    """A string expression built from literals and the class's string attributes, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, names), _value(node.right, names)
        return None if left is None or right is None else left + right
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and not node.args
    ):
        template = _value(node.func.value, names)
        kwargs = {k.arg: _value(k.value, names) for k in node.keywords if k.arg}
        if template is None or any(v is None for v in kwargs.values()):
            return None
        try:
            return template.format(**kwargs)
        except (KeyError, IndexError, ValueError):
            return None
    return None


def _flags(call: ast.Call) -> list[str]:
    out = []
    for node in [*call.args[1:], *(k.value for k in call.keywords if k.arg == "flags")]:
        for part in ast.walk(node):
            if isinstance(part, ast.Attribute) and part.attr.isupper():
                out.append(part.attr)
    return sorted(out)


def _compiles(node: ast.AST, names: dict[str, str]) -> list[dict[str, Any]]:
    """The ``re.compile(...)`` calls of a denylist, literal tuple loops unrolled."""
    found: list[dict[str, Any]] = []
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        for item in node.elts:
            found += _compiles(item, names)
    elif isinstance(node, ast.GeneratorExp | ast.ListComp):
        gen = node.generators[0]
        if isinstance(gen.target, ast.Name) and isinstance(gen.iter, ast.Tuple | ast.List):
            for item in gen.iter.elts:
                found += _compiles(node.elt, {**names, gen.target.id: _value(item, names) or ""})
    elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "compile":
        pattern = _value(node.args[0], names) if node.args else None
        found.append({"pattern": pattern, "flags": _flags(node)})
    return found


def extract(package: Path) -> dict[str, Any]:
    """Every detector class with a ``denylist`` in ``package/plugins/*.py``."""
    version = "unknown"
    init = (
        (package / "__version__.py").read_text("utf-8")
        if (package / "__version__.py").exists()
        else ""
    )
    if m := re.search(r"VERSION\s*=\s*['\"]([^'\"]+)", init):
        version = m.group(1)
    detectors = []
    for path in sorted((package / "plugins").glob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            names: dict[str, str] = {}
            secret_type, patterns = "", []
            for stmt in cls.body:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                    continue
                target = stmt.targets[0]
                if not isinstance(target, ast.Name):
                    continue
                if (text := _value(stmt.value, names)) is not None:
                    names[target.id] = text
                if target.id == "secret_type":
                    secret_type = text or ""
                elif target.id == "denylist":
                    patterns = _compiles(stmt.value, names)
            if patterns:
                detectors.append(
                    {
                        "file": f"plugins/{path.name}",
                        "class": cls.name,
                        "secret_type": secret_type,
                        "patterns": patterns,
                    }
                )
    return {"source": f"detect-secrets {version}", "detectors": detectors}


# -- step 2: the table ----------------------------------------------------------------------


def literal_head(pattern: str) -> int:
    """How many literal characters every match of ``pattern`` starts with (at least): the
    leading literals, plus the head of the first group, branch or small set after them."""

    def head(items: Any) -> int:
        n = 0
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                n += 1
            elif name == "SUBPATTERN":
                return n + head(arg[-1])
            elif name == "BRANCH":
                return n + min(head(b) for b in arg[1])
            elif name == "IN" and all(str(o) == "LITERAL" for o, _ in arg):
                n += 1  # one of a few letters: [rs]k_live_
            else:
                return n
        return n

    return head(sre_parse.parse(pattern))


def _open_repeats(items: Any) -> bool:
    for op, arg in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if arg[1] == sre_parse.MAXREPEAT or _open_repeats(arg[2]):
                return True
        elif name in ("SUBPATTERN", "ASSERT", "ASSERT_NOT"):
            if _open_repeats(arg[-1]):
                return True
        elif name == "BRANCH" and any(_open_repeats(b) for b in arg[1]):
            return True
    return False


def has_open_repeat(pattern: str) -> bool:
    """Whether ``pattern`` has a repeat with no upper bound (``+``, ``*``, ``{n,}``)."""
    return _open_repeats(sre_parse.parse(pattern))


def capped(pattern: str) -> str:
    """``pattern`` with every open repeat (``+``, ``*``, ``{n,}``, outside a class) capped at CAP."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]" or out[-1] in ("[", "[^")
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif c in "+*" and out and out[-1] not in ("(", "|"):
            out.append(f"{{{1 if c == '+' else 0},{CAP}}}")
            i += 1
            continue
        elif c == "{" and (m := re.match(r"\{(\d+),\}", pattern[i:])):
            out.append(f"{{{m.group(1)},{CAP}}}")
            i += m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def build(recorded: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The table: taken upstream patterns, then the overrides' own, and what was skipped."""
    skip: dict[str, str] = overrides.get("skip", {})
    shapes: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    for det in recorded["detectors"]:
        for i, entry in enumerate(det["patterns"]):
            ident = f"{det['class']}#{i}"
            source = f"{recorded['source']} {det['file']} {ident} ({det['secret_type']})"
            upstream = entry["pattern"]
            reason = skip.get(ident) or skip.get(det["class"])
            if reason is None and upstream is None:
                reason = "built at run time: not a literal pattern"
            if reason is None and literal_head(upstream) < 2:
                reason = (
                    "no literal prefix: it would be tried at every position of every line and "
                    "matches text that is no secret (a hash, a word); a context pattern is "
                    "covered by the structural shapes (key = value, URL userinfo)"
                )
            if reason is None and "VERBOSE" in entry["flags"]:
                reason = "a verbose pattern (whitespace in it is not literal)"
            pattern = None if reason else capped(upstream)
            if pattern is not None and "IGNORECASE" in entry["flags"]:
                pattern = f"(?i:{pattern})"
            if pattern is not None and has_open_repeat(pattern):
                reason, pattern = "an open repeat that could not be capped", None
            if pattern is None:
                skipped.append({"id": ident, "source": source, "reason": str(reason)})
            else:
                shapes.append(
                    {"id": ident, "source": source, "upstream": upstream, "pattern": pattern}
                )
    for ident, extra in overrides.get("add", {}).items():
        pattern = str(extra["pattern"])
        if has_open_repeat(pattern) or literal_head(pattern) < 2:
            raise SystemExit(f"overrides.toml: {ident}: needs a literal prefix and capped repeats")
        shapes.append({"id": ident, "source": str(extra["source"]), "pattern": pattern})
    return {
        "generated_by": "tools/gen_secret_shapes.py",
        "upstream": recorded["source"],
        "cap": CAP,
        "shapes": shapes,
        "skipped": skipped,
    }


def dumps(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, ensure_ascii=False) + "\n"


def load_overrides() -> dict[str, Any]:
    """``tools/secret_shapes/overrides.toml``."""
    return tomllib.loads(OVERRIDES.read_text("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="source", type=Path, help="an unpacked detect_secrets package"
    )
    args = parser.parse_args(argv)
    if args.source is not None:
        RECORDED.write_text(json.dumps(extract(args.source), indent=1) + "\n", "utf-8")
    recorded = json.loads(RECORDED.read_text("utf-8"))
    TABLE.write_text(dumps(build(recorded, load_overrides())), "utf-8")
    print(f"wrote {TABLE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
