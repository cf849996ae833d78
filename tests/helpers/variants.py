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
    resolve(load_profile(paths, profile), paths)
    write_report(verify_profile(paths, profile, cache, quiet=True), paths.verify_report(profile))
    return paths
