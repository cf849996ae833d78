"""verlenv's own wheel: built from this checkout by the locked setuptools, kept by what it is made of.

The wheel becomes every image's verlenv layer, so it must come out the same from the same sources:
SOURCE_DATE_EPOCH fixes its times, and lockfiles/build-backends.lock's setuptools builds it (its name
is in the wheel's WHEEL file; left to float, uv took the day's newest, 84.2.1 on 2026-12-07, and the
next release would have changed every image ID on a fresh machine). The build is one process of this
interpreter with only the stdlib and that setuptools on its path (-E -S -s), which is all verlenv's
build-system asks for: `uv build` gave the same bytes in 1.9-2.4 s, most of it making an isolated
environment; this takes about 0.5 s, and nothing when the same sources were built before.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import tomllib

from verlenv.errors import ConfigError
from verlenv.image.context import source_files
from verlenv.lock import backends
from verlenv.lock.lockfile import read_lock
from verlenv.lock.tools import run
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.wheelhouse import HouseFile, fetch_locked

_BUILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from setuptools import build_meta; build_meta.build_wheel(sys.argv[2])"
)


def verlenv_wheel(paths: ProjectPaths, cache: Cache, epoch: int) -> HouseFile:
    """verlenv itself, as a wheel built from this checkout: it becomes the last layer."""
    from verlenv import __version__

    _only_setuptools(paths.root / "pyproject.toml")
    setuptools = fetch_locked(read_lock(backends.constraints(paths)), "setuptools", cache)
    files = source_files(paths.root)
    done = cache.root / "own" / _key(paths.root, files, epoch, setuptools.sha256)
    if not list(done.glob("verlenv-*.whl")):
        _build(paths.root, files, epoch, _backend_tree(setuptools, cache), done, cache)
    [wheel] = list(done.glob("verlenv-*.whl"))
    return HouseFile("verlenv", __version__, wheel.name, sha256_of(wheel), wheel)


def _only_setuptools(pyproject: Path) -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    requires = tomllib.loads(pyproject.read_text()).get("build-system", {}).get("requires", [])
    others = [r for r in requires if canonicalize_name(Requirement(r).name) != "setuptools"]
    if others:
        raise ConfigError(
            f"{pyproject}: build-system.requires asks for {', '.join(others)}; verlenv's wheel is built by the "
            "locked setuptools alone",
            hint="lock what it needs in images/build-backends.toml and teach verlenv/image/ownwheel.py to use it",
        )


def _key(root: Path, files: list[Path], epoch: int, setuptools: str) -> str:
    """Everything the wheel's bytes depend on: each file's path, content and executable bit, the epoch,
    the setuptools, and this interpreter's zlib (it writes the deflated members)."""
    digest = hashlib.sha256()
    for path in files:
        executable = int(bool(path.stat().st_mode & 0o100))
        digest.update(f"{path.relative_to(root).as_posix()}\0{sha256_of(path)}\0{executable}\n".encode())
    inputs = {
        "sources": digest.hexdigest(),
        "epoch": epoch,
        "setuptools": setuptools,
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _backend_tree(setuptools: HouseFile, cache: Cache) -> Path:
    """The locked setuptools unpacked and compiled once, kept by its wheel's sha256."""
    tree = cache.root / "backends" / setuptools.sha256
    if (tree / "setuptools" / "build_meta.py").is_file():
        return tree
    work = Path(tempfile.mkdtemp(prefix="verlenv-setuptools-", dir=cache.tmp))
    try:
        with zipfile.ZipFile(setuptools.path) as archive:
            archive.extractall(work)
        run([sys.executable, "-m", "compileall", "-qq", str(work)], what="compiling the locked setuptools")
        tree.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tree, ignore_errors=True)
        work.rename(tree)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tree


def _build(root: Path, files: list[Path], epoch: int, backend: Path, done: Path, cache: Cache) -> None:
    work = Path(tempfile.mkdtemp(prefix="verlenv-wheel-", dir=cache.tmp))
    try:
        # From a copy of exactly the hashed sources: setuptools reuses a checkout's build/lib, where a
        # module deleted from the tree lives on and would land in the wheel (seen: a stale wheels/index.py)
        clean = work / "src"
        for path in files:
            target = clean / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            # the wheel keeps each file's mode: the process umask (077 in a locked-down shell) must not
            target.chmod(0o755 if path.stat().st_mode & 0o100 else 0o644)
        out = work / "out"
        run(
            [sys.executable, "-E", "-S", "-s", "-c", _BUILD, str(backend), str(out)],
            what="building the verlenv wheel with the locked setuptools",
            cwd=clean,
            env={"SOURCE_DATE_EPOCH": str(epoch)},
            umask=0o022,
        )
        done.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(done, ignore_errors=True)
        out.rename(done)
    finally:
        shutil.rmtree(work, ignore_errors=True)
