"""lockfiles/NAME.builds.json: the wheels verlenv built from locked sdists (flash-attn), by the hash of
every input, with the wheel's sha256 and the sha256 of each file in it.

The record is committed: a build from the same inputs must give the same wheel (or say which files
differ), and `verify` checks the recorded wheel's extensions against torch like any other wheel.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import ConfigError
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import ExtensionBuild
from verlenv.wheels.cache import Cache
from verlenv.wheels.wheelhouse import HouseFile

RECORD_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BuiltWheel:
    name: str
    version: str
    sdist_sha256: str
    key: str  # sha256 of every input: sdist, build environment layers, archs, flags, recipe
    wheel: str  # file name
    wheel_sha256: str
    cuda_archs: list[str]
    env: list[str]
    inputs: dict[str, str]  # what the key covers, spelled out: torch, nvcc, gcc, python, layer DiffIDs
    files: dict[str, str] = field(default_factory=dict)  # path in the wheel -> sha256
    seconds: float = 0.0
    jobs: int = 0

    def made_as(self, build: ExtensionBuild, sdist_sha256: str) -> bool:
        """Whether this wheel is what ``build`` declares, from that sdist: version, architectures, flags."""
        declared = (build.version, list(build.cuda_archs), build.flags)
        return self.sdist_sha256 == sdist_sha256 and (self.version, self.cuda_archs, self.env) == declared

    def house_file(self, cache: Cache) -> HouseFile | None:
        path = cache.cached_file(self.wheel_sha256)
        return HouseFile(self.name, self.version, self.wheel, self.wheel_sha256, path) if path else None


def builds_path(paths: ProjectPaths, profile: str) -> Path:
    return paths.lockfiles / f"{profile}.builds.json"


def read(path: Path) -> dict[str, BuiltWheel]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})", hint="restore it from version control") from None
    if data.get("schema_version") != RECORD_SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {data.get('schema_version')!r}, expected {RECORD_SCHEMA_VERSION}")
    return {name: BuiltWheel(**entry) for name, entry in data.get("builds", {}).items()}


def write(path: Path, builds: dict[str, BuiltWheel]) -> None:
    payload: dict[str, Any] = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "builds": {name: asdict(b) for name, b in sorted(builds.items())},
    }
    atomic.write_text(path, json.dumps(payload, indent=1, sort_keys=True) + "\n")
