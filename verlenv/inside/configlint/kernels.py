"""Which attention kernels an environment offers, read from its files: the lint imports none of them (no torch).

transformers 5.9 takes flash_attention_2 from the `flash-attn` distribution's `flash_attn` package,
flash_attention_3 from `flash-attn-3`'s `flash_attn_interface` module and flash_attention_4 from
`flash-attn-4`'s `flash_attn` package (transformers/utils/import_utils.py). flash-attn 2 is useless without
its compiled extension, `flash_attn_2_cuda*.so` beside the package: a failed source build leaves it out.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

from verlenv.errors import ConfigError

FA2, FA3, FA4 = "flash_attention_2", "flash_attention_3", "flash_attention_4"
PACKAGES = {FA2: "flash-attn", FA3: "flash-attn-3", FA4: "flash-attn-4"}  # implementation -> distribution
_MODULES = {FA2: "flash_attn", FA3: "flash_attn_interface", FA4: "flash_attn"}


@dataclass(frozen=True)
class Kernels:
    """What each flash attention implementation lacks in one environment ('' when it is usable)."""

    where: str  # named in findings: "this environment", "the lock lockfiles/NAME.lock", ...
    lacking: tuple[tuple[str, str], ...]

    def lacks(self, implementation: str) -> str:
        return dict(self.lacking).get(implementation, "")


def here() -> Kernels:
    return in_paths(sys.path, "this environment")


def in_paths(paths: Sequence[str], where: str) -> Kernels:
    """From the files under ``paths`` (sys.path entries, or a site-packages of another environment)."""
    entries = [str(p) for p in paths if p and Path(p).is_dir()]
    return Kernels(where, tuple((impl, _lacks_on_path(impl, entries)) for impl in PACKAGES))


def _lacks_on_path(implementation: str, paths: list[str]) -> str:
    package, module = PACKAGES[implementation], _MODULES[implementation]
    dist = next(iter(importlib.metadata.distributions(name=package, path=paths)), None)
    if dist is None:
        return f"the {package} distribution is not installed"
    if PathFinder.find_spec(module, paths) is None:
        return f"{package} {dist.version} is recorded, but its module {module} is missing"
    if implementation == FA2 and not any(next(Path(p).glob("flash_attn_2_cuda*.so"), None) for p in paths):
        return f"{package} {dist.version} has no compiled extension flash_attn_2_cuda*.so (a failed or CPU-only build)"
    return ""


def from_listing(names: dict[str, str], where: str) -> Kernels:
    """From a list of distributions (an image manifest, a lock): its compiled files are verify's and doctor's
    to check, so presence is what this can tell."""
    return Kernels(
        where,
        tuple((impl, "" if package in names else f"{package} is not in it") for impl, package in PACKAGES.items()),
    )


def from_option(value: str) -> Kernels:
    """--installed-from: a site-packages directory, an image or venv manifest (.json), a lock, or a profile."""
    path = Path(value)
    if path.is_dir():
        return in_paths([str(path)], f"site-packages {path}")
    if path.is_file() and path.suffix == ".json":
        return from_listing(_manifest_dists(path), f"the manifest {path}")
    if path.is_file():
        return from_listing(_lock_dists(path), f"the lock {path}")
    lock = _profile_lock(value)
    return from_listing(_lock_dists(lock), f"profile {value}'s lock {lock}")


def _manifest_dists(path: Path) -> dict[str, str]:
    import json

    from verlenv.image.manifest import Manifest

    try:
        return dict(Manifest.from_json(json.loads(path.read_text())).distributions)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--installed-from {path}: not a verlenv manifest ({exc})") from None


def _lock_dists(path: Path) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    from verlenv.lock.lockfile import read_lock

    return {canonicalize_name(d.name): d.version for d in read_lock(path).dists}


def _profile_lock(name: str) -> Path:
    from verlenv.paths import find_root

    try:
        lock = find_root().lock(name)
    except ConfigError:  # not in a checkout: the argument was meant as a path
        lock = None
    if lock is None or not lock.is_file():
        raise ConfigError(
            f"--installed-from {name}: no such site-packages directory, manifest, lock or profile",
            hint="give a site-packages directory, /opt/verlenv/manifest.json, lockfiles/NAME.lock or a profile name",
        )
    return lock
