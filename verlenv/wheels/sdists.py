"""Turn hash-verified sdists into wheels on the host, before the offline image build.

Some locked dependencies ship only an sdist (antlr4-python3-runtime, pulled in by hydra-core).
The image build has no network and installs wheels only, so these are built here with uv
(isolated build environment) and must come out pure Python, or built for the target's tags. The
build environment holds only the hash-locked backends of lockfiles/build-backends.lock.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import parse_wheel_filename

from verlenv.errors import ResolutionError
from verlenv.lock import backends
from verlenv.lock.tools import run, uv_binary
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.wheelhouse import HouseFile

# The wheel's zip entries take SOURCE_DATE_EPOCH as their time: without it every build gave another
# wheel sha256, and the image manifest (which records it) another image ID. 1980-01-01, zip's first day.
WHEEL_EPOCH = "315532800"
RECIPE = "sde-umask-2"  # part of the cache key: wheels built before the fixed epoch and umask are not reused


def as_wheels(
    files: list[HouseFile],
    cache: Cache,
    tags: list[Tag],
    python: str,
    paths: ProjectPaths,
    keep: Callable[[HouseFile], bool] = lambda _: False,
) -> list[HouseFile]:
    """``files`` with each sdist (unless ``keep`` says so) replaced by its wheel, built with the locked backends."""
    todo = [f for f in files if not f.is_wheel and not keep(f)]
    if not todo:
        return list(files)
    locked = backends.constraints(paths)
    return [wheel_from_sdist(f, cache, tags, python, locked) if f in todo else f for f in files]


def wheel_from_sdist(sdist: HouseFile, cache: Cache, tags: list[Tag], python: str, locked: Path) -> HouseFile:
    """The wheel built from ``sdist`` with the backends locked in ``locked`` (cached by both's sha256)."""
    key = f"{RECIPE}\0{sdist.sha256}\0{sha256_of(locked)}"
    folder = cache.built_dir(hashlib.sha256(key.encode()).hexdigest())
    existing = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if existing:
        return _house(sdist, existing[0])
    with tempfile.TemporaryDirectory(dir=cache.tmp) as tmp:
        run(
            [
                uv_binary(),
                "build",
                "--wheel",
                "--python",
                python,
                "--out-dir",
                tmp,
                *backends.uv_build_args(locked),
                str(sdist.path),
            ],
            what=f"building a wheel from {sdist.filename} (backends: {locked.name})",
            env={"SOURCE_DATE_EPOCH": WHEEL_EPOCH},
            # The wheel's zip records each file's mode as extracted: under umask 077 antlr4's wheel came
            # out with 0600 entries and another sha256 (the CI build with another umask, 2026-12-04).
            umask=0o022,
        )
        built = sorted(Path(tmp).glob("*.whl"))
        if len(built) != 1:
            raise ResolutionError(f"building {sdist.filename} produced {len(built)} wheels")
        wheel_tags = parse_wheel_filename(built[0].name)[3]
        if not any(t in tags for t in wheel_tags):
            raise ResolutionError(
                f"{sdist.filename} built {built[0].name}, which does not fit the image's platform",
                hint="it has compiled parts: add a wheel for the target to an index the profile uses",
            )
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / built[0].name
        built[0].replace(target)
    return _house(sdist, target)


def _house(sdist: HouseFile, wheel: Path) -> HouseFile:
    return HouseFile(sdist.name, sdist.version, wheel.name, sha256_of(wheel), wheel)
