"""The environment manifest: what a build put into an image (/opt/verlenv/manifest.json) or `verlenv venv`
into a virtual environment (VENV/verlenv-manifest.json), for doctor to compare with what is there now."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_SCHEMA_VERSION = 1
MANIFEST_ENV = "VERLENV_MANIFEST"
DEFAULT_PATH = Path("/opt/verlenv/manifest.json")
VENV_NAME = "verlenv-manifest.json"  # at the root of a venv made by `verlenv venv`


@dataclass(frozen=True)
class Manifest:
    profile: str
    lock_sha256: str
    verify_sha256: str
    source_date_epoch: int
    components: dict[str, str]
    distributions: dict[str, str]  # canonical name -> version, everything installed from the lock
    layers: dict[str, list[str]]
    base: dict[str, str]
    verlenv_version: str
    built_from_sdist: dict[str, str] = field(default_factory=dict)  # name -> sha256 of the wheel we built
    kind: str = "image"  # image | venv
    # Distributions a venv takes from another interpreter instead of installing them:
    # name -> {"version": as installed there, "locked": the lock's version, "site": its site-packages,
    # "tops": its top-level entries}. Their versions are in `distributions` as found there.
    reused: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Locked distributions a venv goes without on purpose (`verlenv bundle --omit`): name -> version.
    omitted: dict[str, str] = field(default_factory=dict)
    # The profile's overrides (name -> why): a declared pin they beat is not an unmet requirement.
    overrides: dict[str, str] = field(default_factory=dict)
    # The profile's ELF waivers (glob over a shared object's path -> why): doctor excuses them as verify did.
    waivers: dict[str, str] = field(default_factory=dict)
    # Files verlenv itself adds below site-packages, owned by no RECORD (pip's CUDA lacks what JIT
    # linkers ask for): absolute path -> "sha256:HEX" or "symlink:TARGET". clean accepts exactly these.
    added: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        # Insertion order is meaningful (layers bottom to top); everything else is built sorted.
        return json.dumps({"schema_version": MANIFEST_SCHEMA_VERSION, **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        fields = {k: v for k, v in data.items() if k != "schema_version"}
        return cls(**fields)


def manifest_path() -> Path:
    """$VERLENV_MANIFEST, else the manifest of the venv this interpreter runs in, else the image's."""
    if os.environ.get(MANIFEST_ENV):
        return Path(os.environ[MANIFEST_ENV])
    venv = Path(sys.prefix) / VENV_NAME
    return venv if venv.exists() else DEFAULT_PATH


def load_manifest(path: Path | None = None) -> Manifest | None:
    target = path or manifest_path()
    try:
        return Manifest.from_json(json.loads(target.read_text()))
    except FileNotFoundError:
        return None
