"""Finding and running the external programs the host side needs (uv, pip)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from verlenv.errors import ResolutionError


def uv_binary() -> str:
    """The uv that ships with the `uv` wheel of verlenv[build], else one on PATH."""
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found]

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise ResolutionError("uv is not installed", hint="pip install 'verlenv[build]' (it brings uv)") from None
        return found


def uv_version(uv: str) -> str:
    out = run([uv, "--version"], what="uv --version").strip()
    return out.split()[1] if len(out.split()) > 1 else out


def pip_command() -> list[str]:
    """pip for `pip download`: this interpreter's if it has one, else the first on PATH."""
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, check=False)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    raise ResolutionError(
        "no pip found for `pip download`", hint="install pip, or drop sources.pip_download from the profile"
    )


def run(
    cmd: list[str], *, what: str, cwd: Path | None = None, env: dict[str, str] | None = None, umask: int = -1
) -> str:
    """Run ``cmd`` (with ``umask`` when given); on failure raise ResolutionError with the tail of its stderr."""
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env=full_env, umask=umask)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise ResolutionError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout
