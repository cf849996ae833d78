"""The build backends of the locked sdists: images/build-backends.toml -> lockfiles/build-backends.lock.

A wheel built from an sdist carries its backend's fingerprints (setuptools writes its own version into
WHEEL), so an unpinned backend gives another wheel, and another image ID, whenever it is released.
The lock has the same header and hash lines as a profile's, and uv takes it as build constraints with
--require-hashes: a backend that is not locked, or whose file does not match, stops the build.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import tomllib

from verlenv import atomic
from verlenv.errors import CheckFailed, ConfigError, ResolutionError
from verlenv.lock.lockfile import LockHeader, parse_lock, read_lock
from verlenv.lock.tools import run, uv_binary, uv_version
from verlenv.paths import ProjectPaths

NAME = "build-backends"
FIX = "verlenv lock --build-backends"


@dataclass(frozen=True)
class Backends:
    """What images/build-backends.toml asks for."""

    snapshot: date
    python: str
    platform: str
    requirements: tuple[str, ...]

    @property
    def exclude_newer(self) -> str:
        return f"{self.snapshot.isoformat()}T00:00:00Z"

    def sha256(self) -> str:
        """Of what the lock is made from, not of the file's text: a comment edit leaves the lock fresh."""
        blob = {"snapshot": self.exclude_newer, "python": self.python, "platform": self.platform}
        blob["requirements"] = list(self.requirements)  # type: ignore[assignment]
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def source(paths: ProjectPaths) -> Path:
    return paths.root / "images" / f"{NAME}.toml"


def lock_path(paths: ProjectPaths) -> Path:
    return paths.lock(NAME)


def load(paths: ProjectPaths) -> Backends:
    path = source(paths)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: the sdists' build backends are not declared") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return Backends(
        snapshot=_snapshot(_field(data, "snapshot", str, path), path),
        python=_field(data, "python", str, path),
        platform=_field(data, "platform", str, path),
        requirements=tuple(_requirements(data, path)),
    )


def _field(data: dict, key: str, kind: type, path: Path):  # type: ignore[no-untyped-def,type-arg]
    if not isinstance(data.get(key), kind):
        raise ConfigError(f"{path}: field '{key}' must be a {kind.__name__}")
    return data[key]


def _snapshot(text: str, path: Path) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{path}: field 'snapshot' must be a date (YYYY-MM-DD), not {text!r}") from None


def _requirements(data: dict, path: Path) -> list[str]:  # type: ignore[type-arg]
    found = data.get("requirements")
    if not isinstance(found, list) or not found or not all(isinstance(r, str) and r for r in found):
        raise ConfigError(f"{path}: field 'requirements' must be a non-empty list of requirement strings")
    return found


def resolve(paths: ProjectPaths) -> Path:
    """Lock the backends with uv; nothing is written on any failure."""
    wanted = load(paths)
    uv = uv_binary()
    with tempfile.TemporaryDirectory(prefix="verlenv-backends-") as tmp:
        work = Path(tmp)
        (work / "backends.in").write_text("".join(f"{r}\n" for r in wanted.requirements))
        run(
            [
                uv,
                "pip",
                "compile",
                "backends.in",
                "--python-platform",
                wanted.platform,
                "--python-version",
                wanted.python,
                "--exclude-newer",
                wanted.exclude_newer,
                "--generate-hashes",
                "--no-header",
                "--quiet",
                "--output-file",
                "out.txt",
            ],
            what=f"uv pip compile for {source(paths).name}",
            cwd=work,
        )
        body = (work / "out.txt").read_text()
    header = LockHeader(NAME, wanted.sha256(), uv_version(uv), wanted.python, wanted.platform, wanted.exclude_newer)
    text = header.render().replace("edit the profile", f"edit images/{NAME}.toml") + body
    target = lock_path(paths)
    try:
        locked = parse_lock(text, target)
    except ConfigError as exc:
        raise ResolutionError(
            f"uv produced an unusable lock for the build backends; nothing written.\n{exc.message}"
        ) from None
    atomic.write_text(target, text)
    pins = ", ".join(d.pin for d in locked.dists)
    print(f"{NAME}: {pins} as of {wanted.snapshot} -> {target}", file=sys.stderr, flush=True)
    return target


def state(paths: ProjectPaths) -> tuple[str, str]:
    """("fresh" | "stale" | "missing" | "invalid", why), offline."""
    target = lock_path(paths)
    if not target.exists():
        return "missing", f"{target} does not exist"
    try:
        wanted = load(paths)
        locked = read_lock(target)
    except ConfigError as exc:
        return "invalid", exc.message
    if locked.header.profile != NAME:
        return "invalid", f"lock header names '{locked.header.profile}', not {NAME}"
    if locked.header.profile_sha256 != wanted.sha256():
        return "stale", f"{source(paths).name} changed since the lock was made"
    return "fresh", ", ".join(d.pin for d in locked.dists)


def uv_build_args(locked: Path) -> list[str]:
    """`uv build` arguments that hold its isolated build environment to the locked backends."""
    return ["--build-constraints", str(locked), "--require-hashes"]


def constraints(paths: ProjectPaths) -> Path:
    """The backends lock for an sdist build: refused unless fresh, so no build floats on the day's backend."""
    found, why = state(paths)
    if found != "fresh":
        raise CheckFailed(f"the sdists' build-backend lock is {found} ({why})", hint=FIX)
    return lock_path(paths)
