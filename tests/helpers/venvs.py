"""Real virtual environments for doctor and clean tests: made with venv, filled with real pip.

A venv made from the test interpreter with --system-site-packages would see the *base*
interpreter's site (venvs of venvs do not chain), which on a fresh machine has none of verlenv's
core dependencies. So the venvs are isolated, and verlenv runs in them from this checkout with its
core dependencies (packaging, pyelftools) on PYTHONPATH from a folder holding only those: what the
venv's own site-packages holds is exactly what a test installed there.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = ("packaging", "elftools")  # import names of verlenv's core dependencies


@dataclass(frozen=True)
class Venv:
    root: Path
    core: Path  # a folder with links to verlenv's core dependencies only

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site(self) -> Path:
        return next((self.root / "lib").glob("python3*/site-packages"))

    def pip(self, *args: str) -> None:
        subprocess.run(
            [
                str(self.python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                *args,
            ],
            check=True,
            capture_output=True,
        )

    def verlenv(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """verlenv from this checkout, run by this venv's interpreter (so probes import from the venv)."""
        full = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(self.core))), **(env or {})}
        return subprocess.run(
            [str(self.python), "-m", "verlenv", *args],
            capture_output=True,
            text=True,
            env=full,
            check=False,
            timeout=300,
        )


def core_folder(where: Path, without: tuple[str, ...] = ()) -> Path:
    """Links to this interpreter's copies of verlenv's core dependencies, minus ``without``."""
    where.mkdir(parents=True, exist_ok=True)
    for name in CORE:
        if name not in without:
            (where / name).symlink_to(Path(importlib.import_module(name).__file__).parent)
    return where


def make_venv(where: Path, without: tuple[str, ...] = ()) -> Venv:
    """An isolated venv; verlenv run in it sees its core dependencies except those in ``without``."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, capture_output=True)
    return Venv(where, core_folder(where.parent / f"{where.name}-core", without))
