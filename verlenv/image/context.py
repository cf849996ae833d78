"""What goes into an image: the profile's wheels grouped into layers, staged and re-hashed, and
verlenv's own wheel built from this checkout."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv.errors import IntegrityError
from verlenv.profiles.profile import LAYER_ORDER, Profile
from verlenv.verify.distmeta import DistMeta, read_meta
from verlenv.verify.metadata import reachable
from verlenv.wheels.cache import sha256_of
from verlenv.wheels.wheelhouse import HouseFile

VENV = "/opt/venv"
# What verlenv's wheel is made of: a change anywhere else (README, tests) changes no image.
SOURCE_GLOBS = ("pyproject.toml", "verlenv/**/*.py", "verlenv/py.typed", "verlenv/schemas/*.json")


def source_date_epoch(exclude_newer: str) -> int:
    """SOURCE_DATE_EPOCH from the lock's snapshot timestamp (e.g. 2026-09-25T00:00:00Z)."""
    return int(dt.datetime.fromisoformat(exclude_newer.replace("Z", "+00:00")).timestamp())


def group_layers(profile: Profile, files: list[HouseFile]) -> dict[str, tuple[HouseFile, ...]]:
    """layer -> its wheels, in LAYER_ORDER. The torch layer holds torch and only what torch itself
    needs among the torch patterns; the rest of those patterns goes to torch-extras."""
    torch_needs = _torch_closure(profile, files)
    layers: dict[str, list[HouseFile]] = {layer: [] for layer in LAYER_ORDER}
    for house in files:
        layer = profile.layer_of(house.name)
        if layer == "torch" and torch_needs is not None and canonicalize_name(house.name) not in torch_needs:
            layer = "torch-extras"
        layers[layer].append(house)
    return {layer: tuple(sorted(items, key=lambda h: h.name)) for layer, items in layers.items() if items}


def _torch_closure(profile: Profile, files: list[HouseFile]) -> set[str] | None:
    candidates = {canonicalize_name(h.name): h for h in files if profile.layer_of(h.name) == "torch"}
    if "torch" not in candidates:
        return None
    metas = {name: _meta(house) for name, house in candidates.items()}
    return reachable(metas, "torch", profile.python, profile.platform)


@functools.lru_cache(maxsize=512)
def _meta(house: HouseFile) -> DistMeta:
    """A wheel's metadata, read once per build: the layers are grouped five times in one, and opening
    torch's and the nvidia-* wheels took 0.66 s of a 7.9 s cpu-smoke rebuild."""
    return read_meta(house.path)


def requirements_text(items: tuple[HouseFile, ...]) -> str:
    return "".join(f"{h.name}=={h.version} --hash=sha256:{h.sha256}\n" for h in items)


def stage_wheels(folder: Path, items: tuple[HouseFile, ...]) -> int:
    """Link ``items`` into ``folder``, each re-hashed on the way; the caller writes the requirement
    files that name them."""
    folder.mkdir(parents=True)
    # hashlib releases the GIL: re-hashing several GB of CUDA wheels scales with the cores.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return sum(pool.map(lambda house: _link_verified(house, folder / house.filename), items))


def _link_verified(house: HouseFile, target: Path) -> int:
    actual = sha256_of(house.path)
    if actual != house.sha256:
        raise IntegrityError(
            f"{house.path}: sha256 is {actual}, the lock says {house.sha256}; nothing was built or tagged",
            hint="the cached wheel was altered; delete it and re-run `verlenv verify` to fetch it again",
        )
    try:
        os.link(house.path, target)
    except OSError:  # another filesystem: copy
        shutil.copy2(house.path, target)
    return target.stat().st_size


def source_files(root: Path) -> list[Path]:
    return sorted({p for pattern in SOURCE_GLOBS for p in root.glob(pattern) if "__pycache__" not in p.parts})


def source_mode(path: Path) -> int:
    """The mode a source file gets in verlenv's wheel: git's rule, the owner's executable bit alone."""
    return 0o755 if path.stat().st_mode & 0o100 else 0o644


def source_sha256(root: Path) -> str:
    """The tree hash of what verlenv's wheel is built from: (path, mode, content) of every source file.
    The mode is git's (100755 or 100644): the wheel keeps it, so the label must too."""
    digest = hashlib.sha256()
    for path in source_files(root):
        mode = f"100{source_mode(path):o}"
        digest.update(f"{path.relative_to(root).as_posix()}\0{mode}\0{sha256_of(path)}\n".encode())
    return digest.hexdigest()
