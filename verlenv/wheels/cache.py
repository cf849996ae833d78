"""The content-addressed cache: wheel files by sha256, and per-wheel ELF symbol tables."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import IntegrityError

CACHE_ENV = "VERLENV_CACHE"
CHUNK = 1 << 20


def default_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verlenv"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class CorruptCacheFile(IntegrityError):
    """A cached file whose bytes no longer hash to the sha256 it is stored under."""

    def __init__(self, path: Path, expected: str, actual: str) -> None:
        super().__init__(
            f"the cached file {path} failed its hash: expected sha256 {expected}, it hashes to {actual}",
            hint="delete it (or run online: verlenv fetches it again); a cache that changes under it is not safe",
        )
        self.path, self.expected, self.actual = path, expected, actual


@dataclass(frozen=True)
class Cache:
    root: Path

    @property
    def tmp(self) -> Path:
        path = self.root / "tmp"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def file_dir(self, sha256: str) -> Path:
        return self.root / "files" / "sha256" / sha256[:2] / sha256

    def present(self) -> frozenset[str]:
        """The sha256s the store has a folder for: one listing, where a lock's every hash (all platforms,
        ~10,000 for the default profile) would be a lookup each."""
        root = self.root / "files" / "sha256"
        if not root.is_dir():
            return frozenset()
        return frozenset(e.name for d in os.scandir(root) if d.is_dir() for e in os.scandir(d.path))

    def cached_file(self, sha256: str) -> Path | None:
        """The stored file for ``sha256``, re-hashed unless its size and mtime match the stamp;
        CorruptCacheFile (exit 6) when it no longer hashes to it."""
        folder = self.file_dir(sha256)
        files = [p for p in folder.glob("*") if not p.name.startswith(".")] if folder.is_dir() else []
        if len(files) != 1:
            return None
        path = files[0]
        stamp = folder / ".stamp"
        if stamp.exists() and stamp.read_text() == self._stamp(path):
            return path
        actual = sha256_of(path)
        if actual != sha256:
            raise CorruptCacheFile(path, sha256, actual)  # never handed out; the caller says what to do
        self._write_stamp(path)
        return path

    def discard(self, sha256: str) -> None:
        """Remove what is stored for ``sha256`` (a corrupt file, before it is fetched again)."""
        folder = self.file_dir(sha256)
        for path in folder.glob("*") if folder.is_dir() else ():
            path.unlink()

    def store(self, source: Path, sha256: str, filename: str) -> Path:
        """Move a verified download into the store (atomic rename within one filesystem)."""
        folder = self.file_dir(sha256)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / filename
        source.replace(target)
        self._write_stamp(target)
        return target

    @staticmethod
    def _stamp(path: Path) -> str:
        stat = path.stat()
        return f"{stat.st_size} {stat.st_mtime_ns}"

    def _write_stamp(self, path: Path) -> None:
        atomic.write_text(path.parent / ".stamp", self._stamp(path))

    def built_dir(self, sdist_sha256: str) -> Path:
        """Where the wheel built from a locked sdist is kept (keyed by the sdist's sha256)."""
        return self.root / "built" / sdist_sha256

    def acceptance_report(self, image_id: str) -> Path:
        """Where `verlenv accept-image` stores an image's report and `verlenv publish` looks for it."""
        return self.root / "acceptance" / f"{image_id.removeprefix('sha256:')}.json"

    def meta_path(self, sha256: str) -> Path:
        """Where a stored file's metadata (verify's DistMeta) is kept: by its sha256, which never changes."""
        return self.root / "meta" / sha256[:2] / f"{sha256}.json"

    def symbols_path(self, wheel_sha256: str) -> Path:
        return self.root / "elf" / f"{wheel_sha256}.json.gz"

    def load_symbols(self, wheel_sha256: str) -> dict[str, Any] | None:
        path = self.symbols_path(wheel_sha256)
        try:
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError, EOFError):
            return None

    def save_symbols(self, wheel_sha256: str, data: dict[str, Any]) -> None:
        path = self.symbols_path(wheel_sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as handle:
            json.dump(data, handle)
        tmp.replace(path)
