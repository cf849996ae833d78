"""Write files and folders so that a reader never sees half of one."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temp file beside ``path``, fsync it, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_folder(target: Path, tmp: Path, fill: Callable[[Path], None]) -> Path:
    """``target`` made whole or not at all: ``fill`` writes a fresh folder under ``tmp`` (same filesystem),
    which is then renamed into place. An existing ``target`` is taken as it is; a killed run leaves only
    its folder under ``tmp``; when another process renamed its own in first, that one is kept."""
    if target.is_dir():
        return target
    work = Path(tempfile.mkdtemp(prefix=f".{target.name[:40]}.", dir=tmp))
    try:
        fill(work)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            work.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
