"""A copy of the project with one profile's pin changed: the layer-reuse test and benchmark use it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from verlenv.lock.resolve import resolve
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.verify.report import verify_profile, write_report
from verlenv.wheels.cache import Cache

COPIED = ("pyproject.toml", "README.md", "verlenv", "images", "lockfiles")


def copy_project(source: ProjectPaths, target: Path) -> ProjectPaths:
    target.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        path = source.root / name
        if path.is_dir():
            shutil.copytree(path, target / name, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        elif path.exists():
            shutil.copy2(path, target / name)
    return ProjectPaths(target)


def repin(source: ProjectPaths, target: Path, profile: str, package: str, version: str, cache: Cache) -> ProjectPaths:
    """Copy the project, change ``package``'s pin in ``profile``, then lock and verify it for real."""
    paths = copy_project(source, target)
    toml = paths.profile(profile)
    text = re.sub(rf'spec = "{re.escape(package)}==[^"]+"', f'spec = "{package}=={version}"', toml.read_text())
    text = re.sub(rf'^{re.escape(package)} = "[^"]+"', f'{package} = "{version}"', text, flags=re.M)
    toml.write_text(text)
    return _lock_and_verify(paths, profile, cache)


def without_builds(source: ProjectPaths, target: Path, profile: str, cache: Cache) -> ProjectPaths:
    """Copy the project with ``profile``'s [[builds]] entries taken out, then lock and verify it for real.

    The build benchmark's stand-in for a profile whose extension wheel this machine has not built
    (the default profile's flash-attn is 4.6 h of compile on 2 cores): every other wheel stays."""
    paths = copy_project(source, target)
    toml = paths.profile(profile)
    toml.write_text(re.sub(r"^\[\[builds\]\]\n(?:(?!\[).*\n|\n)*", "", toml.read_text(), flags=re.M))
    for stale in (paths.lockfiles / f"{profile}.image.json", paths.lockfiles / f"{profile}.builds.json"):
        stale.unlink(missing_ok=True)  # the records of the image with the builds, not of this one
    return _lock_and_verify(paths, profile, cache)


def _lock_and_verify(paths: ProjectPaths, profile: str, cache: Cache) -> ProjectPaths:
    resolve(load_profile(paths, profile), paths)
    write_report(verify_profile(paths, profile, cache, quiet=True), paths.verify_report(profile))
    return paths
