"""Real virtual environments for doctor and clean tests: made with venv, filled with real pip."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Venv:
    root: Path

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
        full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        return subprocess.run(
            [str(self.python), "-m", "verlenv", *args],
            capture_output=True,
            text=True,
            env=full,
            check=False,
            timeout=300,
        )


def make_venv(where: Path) -> Venv:
    """A venv that sees the host's packaging/pyelftools (system site) but installs into its own site."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(where)], check=True, capture_output=True
    )
    return Venv(where)
