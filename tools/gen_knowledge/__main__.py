"""``python -m tools.gen_knowledge``: build the tables and the manifest (see the package doc)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tools.gen_knowledge import build, digest, fetch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "oomdoctor" / "knowledge" / "generated"
SEEDS = Path(__file__).resolve().parent / "seeds.toml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gen_knowledge")
    parser.add_argument("--cache", help="download cache (default ~/.cache/oomdoctor-gen)")
    parser.add_argument("--out", default=str(OUT), help="where the tables go")
    args = parser.parse_args(argv)
    seeds = tomllib.loads(SEEDS.read_text("utf-8"))
    tables = build.build(seeds, fetch.cache_dir(args.cache))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict[str, Any]] = {}
    for name, data in build.to_json(tables, seeds).items():
        path = out / name
        path.write_text(json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n", "utf-8")
        written[name] = {"sha256": digest.file_digest(path), "bytes": path.stat().st_size}
    matched = dict.fromkeys(_roles(seeds), 0)
    for counts in tables.seeds_matched.values():
        for role, n in counts.items():
            matched[role] = matched.get(role, 0) + n
    manifest = {
        "command": ".venv/bin/python -m tools.gen_knowledge",
        "generator_digest": digest.source_digest(),
        "tables": written,
        "releases": {
            e["engine"]: {"why": e["why"], "sources": tables.sources.get(e["engine"], [])}
            for e in seeds["release"]
        },
        "seeds_matched": tables.seeds_matched,
        "unmatched_roles": sorted(role for role, n in matched.items() if n == 0),
        "unmatched_seeds": sorted(seed for seed, n in tables.seed_hits.items() if n == 0),
        "unparsed_files": tables.unparsed,
        "vision_not_encoder": sorted(
            f"{path}:{cls} ({why})" for path, cls, why in tables.vision_other
        ),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    total = sum(w["bytes"] for w in written.values())
    print(f"gen-knowledge: wrote {len(written)} tables, {total} bytes, to {out}", file=sys.stderr)
    return 0


def _roles(seeds: dict[str, object]) -> list[str]:
    out = [s["site"] for s in seeds["site"]]  # type: ignore[attr-defined]
    return out + [p["phase"] for p in seeds["phase"]]  # type: ignore[attr-defined]


if __name__ == "__main__":
    raise SystemExit(main())
