"""Source distributions into the cache, unpacked: ``pip download --no-deps --no-binary :all:``.

Only the files the generator reads are unpacked (Python sources and the Omni stage configs);
nothing here is imported. The cache lives outside the repository (``~/.cache/oomdoctor-gen``,
or ``$OOMDOCTOR_GEN_CACHE``, or ``--cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

KEEP_SUFFIXES = (".py", ".yaml", ".yml")
#: The index pip reads (its default).
INDEX = "https://pypi.org/simple"


def cache_dir(override: str | None = None) -> Path:
    """Where sdists and their unpacked trees are kept."""
    root = override or os.environ.get("OOMDOCTOR_GEN_CACHE") or "~/.cache/oomdoctor-gen"
    return Path(root).expanduser()


def _normal(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def sdist(cache: Path, package: str, version: str) -> Path:
    """The sdist archive of ``package==version`` (downloaded once).

    ``pip download`` first. pip prepares an sdist's metadata before it keeps the file, and that
    runs the package's ``setup.py``: vLLM's imports torch, older setuptools projects need the
    ``wheel`` command. When that fails, the same file is taken from the index pip reads (its
    PEP 691 JSON page), and checked against the sha256 the index gives.
    """
    dest = cache / "sdist"
    dest.mkdir(parents=True, exist_ok=True)
    found = _find(dest, package, version)
    if found is not None:
        return found
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-build-isolation",
        "--no-binary", ":all:", "--dest", str(dest), f"{package}=={version}",
    ]  # fmt: skip
    done = subprocess.run(cmd, check=False, capture_output=True)
    found = _find(dest, package, version)
    if found is None and done.returncode != 0:
        found = _from_index(dest, package, version)
    if found is None:
        found = _wheel(dest, package, version)
    return found


def _wheel(dest: Path, package: str, version: str) -> Path:
    """A release published without an sdist (SGLang after 0.5.10, vLLM-Omni after 0.24): its
    wheel for CPython 3.11 on x86-64 (tens of MB, Python sources inside)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
        "--platform", "manylinux_2_34_x86_64", "--python-version", "311", "--dest", str(dest),
        f"{package}=={version}",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    stem = f"{_normal(package)}-{version}-"
    for path in sorted(dest.iterdir()):
        if path.name.startswith(stem) and path.suffix == ".whl":
            return path
    raise FileNotFoundError(f"no sdist or wheel for {package}=={version}")


def _find(dest: Path, package: str, version: str) -> Path | None:
    for suffix in (".tar.gz", ".zip"):
        for name in (f"{_normal(package)}-{version}{suffix}", f"{package}-{version}{suffix}"):
            if (dest / name).is_file():
                return dest / name
    return None


def _from_index(dest: Path, package: str, version: str) -> Path | None:
    url = f"{INDEX}/{package}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    names = {f"{_normal(package)}-{version}{s}" for s in (".tar.gz", ".zip")}
    names |= {f"{package}-{version}{s}" for s in (".tar.gz", ".zip")}
    entry: dict[str, Any]
    for entry in files:
        if entry["filename"] not in names:
            continue
        out = dest / entry["filename"]
        part = out.with_name(out.name + ".part")
        with urllib.request.urlopen(entry["url"], timeout=600) as response, part.open("wb") as fh:
            shutil.copyfileobj(response, fh)
        want = entry.get("hashes", {}).get("sha256")
        if want and sha256(part) != want:
            part.unlink()
            raise ValueError(f"{entry['filename']}: sha256 differs from the index's")
        part.rename(out)
        return Path(out)
    return None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpacked(cache: Path, package: str, version: str) -> tuple[Path, str]:
    """The unpacked tree (its top folder stripped) and the sdist's sha256."""
    archive = sdist(cache, package, version)
    tree = cache / "src" / f"{_normal(package)}-{version}"
    done = tree / ".complete"
    if not done.is_file():
        tree.mkdir(parents=True, exist_ok=True)
        _extract(archive, tree)
        done.write_text(sha256(archive), "utf-8")
    return tree, done.read_text("utf-8").strip()


def _extract(archive: Path, tree: Path) -> None:
    strip = 0 if archive.suffix == ".whl" else 1  # an sdist's "pkg-1.2.3/"

    def target(name: str) -> Path | None:
        parts = Path(name).parts[strip:]
        if not parts or ".." in parts or not name.endswith(KEEP_SUFFIXES):
            return None
        return tree.joinpath(*parts)

    if archive.suffix in (".zip", ".whl"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                out = target(info.filename)
                if out is not None and not info.is_dir():
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(zf.read(info))
        return
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            out = target(member.name)
            if out is None or not member.isfile():
                continue
            handle = tf.extractfile(member)
            if handle is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(handle.read())
