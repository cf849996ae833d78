"""An offline bundle of a profile's wheels for another interpreter, split into parts of at most N MiB.

What air-gapped sites copy across size-limited channels (and how the closure reaches a GPU host that
cannot download): the wheels the lock names for the target Python (cp312 wheels at the lock's
versions, every one with a sha256 the lock lists), verlenv's own wheel, a deterministic tar of them
cut into parts, bundle.json (every part's and every wheel's sha256, the profile, the lock) and
install.py, which checks all of it before anything is installed (`bundle_install`).

Distributions the target already has (``--exclude 'torch' --exclude 'nvidia-*'`` for a GPU host
with the profile's torch) are left out and recorded as expected there; installing the bundle then
reuses them from the target's interpreter at the locked version, or refuses.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from verlenv import __version__, atomic
from verlenv.errors import CheckFailed, ConfigError, IntegrityError
from verlenv.image import bundle_install
from verlenv.image.context import group_layers, source_date_epoch
from verlenv.image.ownwheel import verlenv_wheel
from verlenv.image.venv import EnvPlan, matches
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import Profile
from verlenv.verify.distmeta import DistMeta, read_meta
from verlenv.verify.metadata import check_engine_gate, check_requirements, split_overridden
from verlenv.verify.report import require_verified
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.sdists import as_wheels
from verlenv.wheels.wheelhouse import HouseFile, fill, target_tags

MIB = 1 << 20


@dataclass(frozen=True)
class Bundle:
    path: Path
    python: str
    wheels: int
    size: int
    parts: tuple[dict[str, Any], ...]
    excluded: dict[str, str]
    omitted: dict[str, str]


def make_bundle(
    paths: ProjectPaths,
    name: str,
    cache: Cache,
    out: Path,
    *,
    python: str,
    part_mib: int,
    exclude: tuple[str, ...] = (),
    omit: tuple[str, ...] = (),
    offline: bool = False,
    quiet: bool = False,
) -> Bundle:
    """Write the bundle to ``out`` (made beside it, then renamed: a failure leaves nothing)."""
    if part_mib < 1:
        raise ConfigError(f"--part-mib {part_mib}: a part holds at least 1 MiB")
    if out.exists():
        raise ConfigError(f"{out} exists", hint="give a new directory; nothing was changed")
    profile, lock, verify_sha = require_verified(paths, name, f"refusing to bundle {name}")
    excluded = {d.name: d.version for d in lock.dists if matches(d.name, exclude)}
    omitted = {d.name: d.version for d in lock.dists if matches(d.name, omit) and d.name not in excluded}
    _keep_bootstrap(excluded.keys() | omitted.keys())
    kept = replace(lock, dists=tuple(d for d in lock.dists if d.name not in excluded | omitted.keys()))
    _say(
        f"{name}: {len(kept.dists)} wheels for Python {python}, {len(excluded)} left to the target, "
        f"{len(omitted)} omitted",
        quiet,
    )
    house = fill(profile, kept, cache, offline=offline, quiet=quiet, python=python)
    tags = target_tags(python, profile.platform)
    epoch = source_date_epoch(lock.header.exclude_newer)
    files = as_wheels(list(house.files), cache, tags, profile.python, paths)
    files.append(verlenv_wheel(paths, cache, epoch))
    _check_metadata(profile, files, excluded, omitted, python)
    # this process's own staging folder: two runs writing one bundle at once never touch each other's
    staging = out.with_name(f".{out.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)  # only a dead run with this pid could have left one
    try:
        parts = _write_parts(staging / bundle_install.PARTS, files, part_mib * MIB, epoch)
        plan = EnvPlan(
            profile=profile.name,
            lock_sha256=lock.sha256,
            verify_sha256=verify_sha,
            python=python,
            source_date_epoch=epoch,
            components={**dict(profile.components), "cuda": profile.cuda},
            files=tuple(files),
            locked={d.name: d.version for d in lock.dists},
            layers={layer: [h.name for h in items] for layer, items in group_layers(profile, files).items()},
            omitted=omitted,
            overrides=profile.override_reasons,
            waivers=dict(profile.waivers),
        )
        manifest = _manifest(plan, profile, files, parts, excluded, part_mib)
        atomic.write_text(staging / bundle_install.MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        shutil.copyfile(Path(bundle_install.__file__), staging / "install.py")
        _rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(p["size"] for p in parts)
    _say(f"{out}: {len(files)} wheels, {size / MIB:.0f} MiB in {len(parts)} part(s) of <= {part_mib} MiB", quiet)
    return Bundle(out, python, len(files), size, tuple(parts), excluded, omitted)


def _keep_bootstrap(left_out: set[str]) -> None:
    # install.py runs verlenv from the bundle's own wheels before any venv exists, and the venv
    # installs with the bundle's pip: these travel even when the target already has them.
    needed = sorted(left_out & {*bundle_install.BOOTSTRAP, "pip"})
    if needed:
        raise ConfigError(
            f"--exclude/--omit would leave out {', '.join(needed)}: install.py runs verlenv from the bundle's "
            "own wheels of " + ", ".join(bundle_install.BOOTSTRAP[1:]) + " and installs with its pip",
            hint="narrow the patterns so that these stay in the bundle; nothing was written",
        )


def _check_metadata(
    profile: Profile, files: list[HouseFile], excluded: dict[str, str], omitted: dict[str, str], python: str
) -> None:
    """The lock was resolved for the profile's Python: every Requires-Dist must still hold at ``python``
    (what the target lends or what is omitted on purpose counts as present at the locked version)."""
    metas = {f.name: read_meta(f.path) for f in files if f.name != "verlenv"}
    metas |= {n: DistMeta(n, v, ()) for n, v in (excluded | omitted).items()}
    violations = check_requirements(
        metas, [Requirement(r.spec) for r in profile.requirements], python, profile.platform
    )
    violations += check_engine_gate({n: m.version for n, m in metas.items()})
    violations, _ = split_overridden(violations, profile.override_reasons)
    if violations:
        raise CheckFailed(
            f"the lock of {profile.name} does not hold at Python {python}; nothing was written:\n  "
            + "\n  ".join(v.render() for v in violations[:10]),
            hint="lock a profile for that Python, or bundle for the profile's own Python",
        )


class _PartWriter(io.RawIOBase):
    """A write-only stream cut into files of at most ``limit`` bytes, hashed as they are written."""

    def __init__(self, folder: Path, limit: int) -> None:
        super().__init__()
        self.folder, self.limit, self.parts = folder, limit, []  # type: ignore[var-annotated]
        self._handle: Any = None
        self._digest: Any = None
        self._size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        view = memoryview(data)
        while view:
            if self._handle is None or self._size == self.limit:
                self._next()
            take = view[: self.limit - self._size]
            self._handle.write(take)
            self._digest.update(take)
            self._size += len(take)
            view = view[len(take) :]
        return len(data)

    def _next(self) -> None:
        self._finish()
        name = f"bundle.tar.{len(self.parts):03d}"
        self._handle, self._digest, self._size = (self.folder / name).open("wb"), hashlib.sha256(), 0
        self.parts.append({"name": name})

    def _finish(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self.parts[-1].update(size=self._size, sha256=self._digest.hexdigest())
            self._handle = None

    def close(self) -> None:
        self._finish()
        super().close()


def _rename(staging: Path, out: Path) -> None:
    try:
        staging.rename(out)
    except OSError:
        if not out.exists():
            raise
        raise ConfigError(
            f"{out} exists: another run made it while this one was writing; nothing of this run was kept",
            hint="give a new directory, or use the one the other run made",
        ) from None


def _write_parts(folder: Path, files: list[HouseFile], limit: int, epoch: int) -> list[dict[str, Any]]:
    """A deterministic tar of the wheels (sorted, fixed owner and mtime): same inputs, same parts."""
    folder.mkdir(parents=True)
    writer = _PartWriter(folder, limit)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for item in sorted(files, key=lambda f: f.filename):
            if sha256_of(item.path) != item.sha256:
                raise IntegrityError(f"{item.path}: no longer matches sha256 {item.sha256}; nothing was written")
            info = tarfile.TarInfo(item.filename)
            info.size, info.mtime, info.mode = item.path.stat().st_size, epoch, 0o644
            with item.path.open("rb") as handle:
                tar.addfile(info, handle)
    writer.close()
    return writer.parts


def _manifest(
    plan: EnvPlan,
    profile: Profile,
    files: list[HouseFile],
    parts: list[dict[str, Any]],
    excluded: dict[str, str],
    part_mib: int,
) -> dict[str, Any]:
    return {
        "format": bundle_install.FORMAT,
        "made_by": f"verlenv {__version__}",
        "profile": plan.profile,
        "lock_sha256": plan.lock_sha256,
        "verify_sha256": plan.verify_sha256,
        "python": plan.python,
        "platform": profile.platform,
        "source_date_epoch": plan.source_date_epoch,
        "components": plan.components,
        "locked": plan.locked,
        "layers": plan.layers,
        "part_mib": part_mib,
        "parts": parts,
        "wheels": [
            {"name": f.name, "version": f.version, "filename": f.filename, "sha256": f.sha256}
            for f in sorted(files, key=lambda f: f.filename)
        ],
        "expected_on_target": excluded,
        "omitted": plan.omitted,
        "overrides": plan.overrides,
        "waivers": plan.waivers,
    }


def plan_from_bundle(bundle: Path, wheelhouse: Path) -> EnvPlan:
    """The plan a bundle describes, its wheels in ``wheelhouse`` (each re-checked against its sha256)."""
    try:
        data = bundle_install.read_manifest(bundle)
    except bundle_install.BundleError as exc:
        raise ConfigError(str(exc)) from None
    files = []
    for wheel in data["wheels"]:
        path = wheelhouse / wheel["filename"]
        if not path.is_file() or sha256_of(path) != wheel["sha256"]:
            raise IntegrityError(f"{path}: missing or not sha256 {wheel['sha256']}; nothing was installed")
        files.append(HouseFile(wheel["name"], wheel["version"], wheel["filename"], wheel["sha256"], path))
    return EnvPlan(
        profile=data["profile"],
        lock_sha256=data["lock_sha256"],
        verify_sha256=data["verify_sha256"],
        python=data["python"],
        source_date_epoch=data["source_date_epoch"],
        components=data["components"],
        files=tuple(files),
        locked=data["locked"],
        layers=data["layers"],
        omitted=data.get("omitted", {}),
        overrides=data.get("overrides", {}),
        waivers=data.get("waivers", {}),
    )


def expected_on_target(bundle: Path) -> tuple[str, ...]:
    return tuple(bundle_install.read_manifest(bundle)["expected_on_target"])


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[bundle] {message}", file=sys.stderr, flush=True)
