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
from functools import partial
from pathlib import Path

import tomllib

from verlenv import atomic
from verlenv.errors import ConfigError
from verlenv.image.context import source_files, source_mode, source_sha256
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
    done = cache.root / "own" / _key(paths.root, epoch, setuptools.sha256)
    if not done.is_dir():
        backend = _backend_tree(setuptools, cache)
        atomic.make_folder(done, cache.tmp, partial(_build, paths.root, files, epoch, backend, cache=cache))
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


def _key(root: Path, epoch: int, setuptools: str) -> str:
    """Everything the wheel's bytes depend on: the sources (source_sha256: each file's path, executable
    bit and content), the epoch, the setuptools, and this interpreter's zlib (it writes the deflated
    members)."""
    inputs = {
        "sources": source_sha256(root),
        "epoch": epoch,
        "setuptools": setuptools,
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _backend_tree(setuptools: HouseFile, cache: Cache) -> Path:
    """The locked setuptools unpacked and compiled once, kept by its wheel's sha256."""

    def fill(work: Path) -> None:
        with zipfile.ZipFile(setuptools.path) as archive:
            archive.extractall(work)
        run([sys.executable, "-m", "compileall", "-qq", str(work)], what="compiling the locked setuptools")

    return atomic.make_folder(cache.root / "backends" / setuptools.sha256, cache.tmp, fill)


def clean_copy(root: Path, files: list[Path], target: Path) -> None:
    """``files`` of ``root`` copied under ``target`` with modes that do not depend on the umask.

    From a copy of exactly the hashed sources: setuptools reuses a checkout's build/lib, where a module
    deleted from the tree lives on and would land in the wheel (seen: a stale wheels/index.py)."""
    for path in files:
        copy = target / path.relative_to(root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
        # the wheel keeps each file's mode: the process umask (077 in a locked-down shell) must not
        copy.chmod(source_mode(path))


def _build(root: Path, files: list[Path], epoch: int, backend: Path, work: Path, cache: Cache) -> None:
    """The wheel into ``work``, built in a clean copy of the sources beside it in the cache's tmp."""
    with tempfile.TemporaryDirectory(prefix="verlenv-wheel-", dir=cache.tmp) as tmp:
        clean = Path(tmp) / "src"
        clean_copy(root, files, clean)
        run(
            [sys.executable, "-E", "-S", "-s", "-c", _BUILD, str(backend), str(work)],
            what="building the verlenv wheel with the locked setuptools",
            cwd=clean,
            env={"SOURCE_DATE_EPOCH": str(epoch)},
            umask=0o022,
        )
