"""The cache of the shipped TOML files (oomdoctor/knowledge/builtin_tables.json): current, and
read exactly as tomllib would read each file; anything else is parsed as before."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from oomdoctor import pipeline
from oomdoctor.knowledge import toml_file
from tests.conftest import RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REBUILD = "python -m oomdoctor.knowledge.toml_file"


def test_the_cache_is_current() -> None:
    """A shipped file changed without the cache: the run stays correct (the file is parsed) but
    slower; rebuild the cache and commit it with the change."""
    assert toml_file.CACHE.read_text("utf-8") == toml_file.cache_text(toml_file.shipped_files()), (
        f"{toml_file.CACHE.name} is stale: run `{REBUILD}`"
    )


def test_every_shipped_file_is_cached() -> None:
    files = toml_file.shipped_files()
    assert {p.parent for p in files} == {RULES, toml_file.CACHE.parent}
    assert len(files) >= 20
    cached = json.loads(toml_file.CACHE.read_text("utf-8"))
    missing = [p.name for p in files if p.read_text("utf-8") not in cached]
    assert not missing, f"not cached (a date or NaN in them?): {missing}; run `{REBUILD}`"


def test_a_cached_file_reads_as_tomllib_reads_it() -> None:
    for path in toml_file.shipped_files():
        read = toml_file.read(path)
        assert not isinstance(read, str), read
        text, table = read
        assert text == path.read_text("utf-8")
        assert toml_file.same(table, tomllib.loads(text)), path.name


def test_each_read_gives_a_table_of_its_own() -> None:
    path = RULES / "kv-pressure.toml"
    first = toml_file.read(path)
    assert not isinstance(first, str)
    first[1]["id"] = "changed"
    first[1]["docs"].clear()
    again = toml_file.read(path)
    assert not isinstance(again, str)
    assert again[1]["id"] == "kv-pressure"
    assert again[1]["docs"]


def test_a_changed_file_is_parsed(tmp_path: Path) -> None:
    text = (RULES / "kv-pressure.toml").read_text("utf-8")
    changed = text.replace('id = "kv-pressure"', 'id = "kv-pressure-copy"', 1)
    changed = changed.replace('title = "', 'title = "Changed: ', 1)
    assert changed.count("kv-pressure-copy") == 1
    assert changed not in json.loads(toml_file.CACHE.read_text("utf-8"))
    path = tmp_path / "kv-pressure-copy.toml"
    path.write_text(changed, "utf-8")
    read = toml_file.read(path)
    assert not isinstance(read, str)
    assert read[1]["title"].startswith("Changed: ")
    rule = pipeline.load_rules([tmp_path])[-1]
    assert (rule.id, rule.title[:9]) == ("kv-pressure-copy", "Changed: ")


def test_a_bad_file_is_still_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('id = "x"\ntitle = \n', "utf-8")
    problem = toml_file.read(path)
    assert isinstance(problem, str)
    assert problem.startswith(f"{path}:2: invalid TOML: ")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ({"a": [1, 2.5, True]}, {"a": [1, 2.5, True]}, True),
        ({"a": 1}, {"a": 1.0}, False),
        ({"a": 1}, {"a": True}, False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),
        ([1, 2], [1, 2, 3], False),
    ],
)
def test_same_compares_types_too(a: object, b: object, same: bool) -> None:
    assert toml_file.same(a, b) is same
