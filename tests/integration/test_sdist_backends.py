"""An sdist with no wheel is built into a wheel with exactly the locked backend: real uv, real setuptools
from the index, the committed lockfiles/build-backends.lock; a backend off the lock or off its hash stops it."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from verlenv.errors import ResolutionError
from verlenv.lock import backends
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.sdists import wheel_from_sdist
from verlenv.wheels.wheelhouse import HouseFile, target_tags

TAGS = target_tags("3.11", "x86_64-manylinux_2_36")
SETUP = "from setuptools import setup\nsetup(name='verlenv-pure-probe', version='0.1', py_modules=['probe'])\n"


def _sdist(where: Path) -> HouseFile:
    """A legacy sdist (setup.py, no pyproject): its backend is setuptools, as antlr4-python3-runtime's is."""
    top = "verlenv-pure-probe-0.1"
    files = {
        "PKG-INFO": "Metadata-Version: 2.1\nName: verlenv-pure-probe\nVersion: 0.1\n",
        "setup.py": SETUP,
        "probe.py": "ANSWER = 42\n",
    }
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(files.items()):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(text), 1700000000, 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
    return HouseFile("verlenv-pure-probe", "0.1", path.name, sha256_of(path), path)


def _generator(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/WHEEL"))
        return next(line for line in archive.read(name).decode().splitlines() if line.startswith("Generator:"))


def test_the_wheel_is_built_by_the_locked_setuptools_and_again_the_same(
    repo_paths: ProjectPaths, tmp_path: Path
) -> None:
    sdist = _sdist(tmp_path / "src")
    lock = backends.lock_path(repo_paths)
    setuptools = read_lock(lock).version_of("setuptools")
    first = wheel_from_sdist(sdist, Cache(tmp_path / "a"), TAGS, "3.11", lock)
    old_umask = os.umask(0o077)  # the two-cold-builds test's second checkout: its wheel had 0600 entries
    try:
        second = wheel_from_sdist(sdist, Cache(tmp_path / "b"), TAGS, "3.11", lock)
    finally:
        os.umask(old_umask)
    assert _generator(first.path) == f"Generator: setuptools ({setuptools})"
    assert first.sha256 == second.sha256


def test_a_backend_off_the_lock_or_off_its_hash_stops_the_build(tmp_path: Path, repo_paths: ProjectPaths) -> None:
    sdist = _sdist(tmp_path / "src")
    text = backends.lock_path(repo_paths).read_text()
    locked = read_lock(backends.lock_path(repo_paths))
    [setuptools] = [d for d in locked.dists if d.name == "setuptools"]
    tampered = tmp_path / "tampered.lock"
    tampered.write_text(text.replace(setuptools.hashes[0], "0" * 64).replace(setuptools.hashes[-1], "1" * 64))
    with pytest.raises(ResolutionError) as caught:
        wheel_from_sdist(sdist, Cache(tmp_path / "c"), TAGS, "3.11", tampered)
    assert "0" * 64 in caught.value.message and "verlenv-pure-probe-0.1.tar.gz" in caught.value.message
    without = tmp_path / "without.lock"
    without.write_text("wheel==0.48.0 \\\n    --hash=sha256:" + "2" * 64 + "\n")
    with pytest.raises(ResolutionError) as caught:
        wheel_from_sdist(sdist, Cache(tmp_path / "d"), TAGS, "3.11", without)
    assert "no trusted hash was provided for: `setuptools`" in caught.value.message


def test_verlenvs_own_wheel_is_built_by_the_locked_setuptools_whatever_the_days_newest(
    repo_paths: ProjectPaths, tmp_path: Path
) -> None:
    """Its WHEEL file names the setuptools that built it, and that file is in every image's verlenv
    layer: uv's newest setuptools of the day (84.2.1 on 2026-12-07) would change every image ID at
    the next setuptools release."""
    from verlenv.image.ownwheel import verlenv_wheel

    setuptools = read_lock(backends.lock_path(repo_paths)).version_of("setuptools")
    first = verlenv_wheel(repo_paths, Cache(tmp_path / "a"), 1790294400)
    old_umask = os.umask(0o077)
    try:
        second = verlenv_wheel(repo_paths, Cache(tmp_path / "b"), 1790294400)
    finally:
        os.umask(old_umask)
    assert _generator(first.path) == f"Generator: setuptools ({setuptools})"
    assert first.sha256 == second.sha256


def test_verlenvs_own_wheel_is_the_wheel_uv_build_makes_and_is_built_once_per_sources(
    repo_paths: ProjectPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process with only the locked setuptools on its path replaced `uv build` (1.9-2.4 s, most of
    it making an isolated environment): the same bytes, and nothing to do for sources built before."""
    import subprocess

    from verlenv.image import ownwheel
    from verlenv.image.context import source_files

    cache = Cache(tmp_path / "cache")
    first = ownwheel.verlenv_wheel(repo_paths, cache, 1790294400)
    clean = tmp_path / "src"
    ownwheel.clean_copy(repo_paths.root, source_files(repo_paths.root), clean)
    subprocess.run(
        ["uv", "build", "-q", "--wheel", "--out-dir", str(tmp_path / "uv"), "--require-hashes",
         "--build-constraints", str(backends.lock_path(repo_paths)), str(clean)],
        env={**os.environ, "SOURCE_DATE_EPOCH": "1790294400"}, check=True, umask=0o022,
    )  # fmt: skip
    [by_uv] = (tmp_path / "uv").glob("verlenv-*.whl")
    assert sha256_of(by_uv) == first.sha256
    assert not list(cache.tmp.glob("verlenv-wheel-*"))  # no build folder left behind

    def no_build(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(ownwheel, "_build", no_build)
    assert ownwheel.verlenv_wheel(repo_paths, cache, 1790294400) == first
    with pytest.raises(AssertionError, match="built again"):  # another epoch is another wheel
        ownwheel.verlenv_wheel(repo_paths, cache, 1790294401)


def test_verlenvs_own_wheel_refuses_a_build_requirement_the_backends_lock_does_not_hold(tmp_path: Path) -> None:
    from verlenv.errors import ConfigError
    from verlenv.image.ownwheel import _only_setuptools

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[build-system]\nrequires = ["setuptools>=68", "setuptools-scm>=8"]\n')
    with pytest.raises(ConfigError) as caught:
        _only_setuptools(pyproject)
    assert str(pyproject) in caught.value.message and "setuptools-scm>=8" in caught.value.message
