"""Generate oomdoctor's code knowledge from the engines' own sources.

Run from the repository root::

    .venv/bin/python -m tools.gen_knowledge            # every engine of seeds.toml
    .venv/bin/python -m tools.gen_knowledge --cache DIR

It downloads each release named in ``seeds.toml`` (``pip download --no-deps --no-binary :all:``;
the index's own file when pip cannot prepare an sdist, a wheel when a release has no sdist) into
``~/.cache/oomdoctor-gen`` (or ``$OOMDOCTOR_GEN_CACHE``), reads the sources with ``ast`` (never
imports them) and writes ``oomdoctor/knowledge/generated/*.json`` plus ``manifest.json``: the
releases and sdist sha256 each table was built from, this package's source digest, and each
table's digest. ``tests/test_code_knowledge.py`` fails when the tables or this generator changed
without a new run.

Modules: ``fetch`` (sources into the cache), ``index`` (one file summarised), ``release`` (a
release's package and name resolution), ``encoders`` (table a), ``callgraph`` (table b),
``stages`` (table c), ``messages`` (table d), ``build`` (all of them, merged over releases),
``digest`` (what the freshness test recomputes).
"""
