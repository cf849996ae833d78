"""Where the project's data lives: images/, lockfiles/ at the repository root."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import ConfigError

ROOT_ENV = "VERLENV_ROOT"


@dataclass(frozen=True)
class ProjectPaths:
    root: Path

    @property
    def profiles(self) -> Path:
        return self.root / "images" / "profiles"

    @property
    def bases(self) -> Path:
        return self.root / "images" / "bases.toml"

    @property
    def catalog(self) -> Path:
        return self.root / "images" / "catalog.json"

    @property
    def lockfiles(self) -> Path:
        return self.root / "lockfiles"

    def profile(self, name: str) -> Path:
        return self.profiles / f"{name}.toml"

    def lock(self, name: str) -> Path:
        return self.lockfiles / f"{name}.lock"

    def verify_report(self, name: str) -> Path:
        return self.lockfiles / f"{name}.verify.json"


def find_root(start: Path | None = None) -> ProjectPaths:
    """$VERLENV_ROOT, else the nearest directory at or above ``start`` holding images/profiles."""
    if os.environ.get(ROOT_ENV):
        root = Path(os.environ[ROOT_ENV]).resolve()
        if not (root / "images" / "profiles").is_dir():
            raise ConfigError(f"${ROOT_ENV}={root} has no images/profiles directory")
        return ProjectPaths(root)
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "images" / "profiles").is_dir():
            return ProjectPaths(candidate)
    raise ConfigError(
        f"no verlenv project found at or above {here}",
        hint=f"run inside a checkout (a directory with images/profiles/) or set ${ROOT_ENV}",
    )
