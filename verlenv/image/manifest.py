"""The image manifest (/opt/verlenv/manifest.json): what the build put in, for doctor to compare."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_SCHEMA_VERSION = 1
MANIFEST_ENV = "VERLENV_MANIFEST"
DEFAULT_PATH = Path("/opt/verlenv/manifest.json")


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

    def to_json(self) -> str:
        # Insertion order is meaningful (layers bottom to top); everything else is built sorted.
        return json.dumps({"schema_version": MANIFEST_SCHEMA_VERSION, **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        fields = {k: v for k, v in data.items() if k != "schema_version"}
        return cls(**fields)


def manifest_path() -> Path:
    return Path(os.environ.get(MANIFEST_ENV) or DEFAULT_PATH)


def load_manifest(path: Path | None = None) -> Manifest | None:
    target = path or manifest_path()
    try:
        return Manifest.from_json(json.loads(target.read_text()))
    except FileNotFoundError:
        return None
