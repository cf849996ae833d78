"""A throwaway verlenv project around a set of real wheels: profile, bases, lock, filled cache."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.fakewheels import sha256
from verlenv.lock.lockfile import LockHeader
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache

BASE_LIBS = ["libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"]

PROFILE = """schema_version = 1
description = "fixture"
python = "3.11"
platform = "x86_64-manylinux_2_36"
cuda = "none"
base = "fixture-base"
snapshot = "2026-01-01"
snapshot_why = "fixture"
engine = "none"

[components]
torch = "2.6.0"

{requirements}
[layers]
torch = ["torch"]
"""


@dataclass(frozen=True)
class FakeProject:
    paths: ProjectPaths
    cache: Cache
    name: str = "fake"


def make_project(
    root: Path,
    wheels: list[Path],
    *,
    glibc: str = "2.36",
    requirements: list[str] | None = None,
    cache_them: bool = True,
) -> FakeProject:
    images = root / "images" / "profiles"
    images.mkdir(parents=True)
    (root / "lockfiles").mkdir()
    libs = ", ".join(f'"{lib}"' for lib in BASE_LIBS)
    (root / "images" / "bases.toml").write_text(
        f'[bases."fixture-base"]\nkind = "debian"\nimage = "x"\npython = "3.11"\nglibc = "{glibc}"\n'
        f'glibcxx = "3.4.30"\nlibraries = [{libs}]\n'
    )
    reqs = requirements if requirements is not None else [_pin(w) for w in wheels]
    block = "".join(f'[[requirements]]\nspec = "{r}"\nwhy = "fixture"\n\n' for r in reqs)
    (images / "fake.toml").write_text(PROFILE.format(requirements=block))
    paths = ProjectPaths(root)
    profile = load_profile(paths, "fake")
    header = LockHeader("fake", profile.sha256(), "test", "3.11", profile.platform, profile.exclude_newer)
    body = "".join(f"{_pin(w)} \\\n    --hash=sha256:{sha256(w)}\n" for w in sorted(wheels, key=lambda p: p.name))
    (root / "lockfiles" / "fake.lock").write_text(header.render() + body)
    cache = Cache(root / "cache")
    if cache_them:
        for wheel in wheels:
            copy = cache.tmp / wheel.name
            shutil.copy(wheel, copy)
            cache.store(copy, sha256(wheel), wheel.name)
    return FakeProject(paths, cache)


def _pin(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name}=={version}"
