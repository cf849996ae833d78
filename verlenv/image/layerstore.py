"""Written layers, kept in the cache: the tar by its DiffID, its per-file entries beside it, and a
key (the hash of everything that went into the layer) that finds it again without rebuilding it."""

from __future__ import annotations

import functools
import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

from verlenv import atomic
from verlenv.image.tarlayer import Entry, LayerInfo
from verlenv.wheels.cache import Cache

STORE_VERSION = 1


@dataclass(frozen=True)
class StoredLayer:
    diff_id: str
    path: Path
    size: int
    entries_path: Path

    def entries(self) -> tuple[Entry, ...]:
        return _entries(self.entries_path)


@functools.lru_cache(maxsize=16)
def _entries(path: Path) -> tuple[Entry, ...]:
    """A stored layer's entries, parsed once: its file is named by the DiffID and never rewritten with
    other content, and one build reads each layer's three times (files manifest, record, check)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return tuple(parse_entry(line) for line in handle.read().splitlines())


def parse_entry(line: str) -> Entry:
    """An entry from its ``Entry.line()`` form."""
    path, kind, mode, owner, size, sha256, target = line.split("\t")
    uid, gid = owner.split(":")
    return Entry(path, kind, int(mode, 8), int(size), sha256, target, int(uid), int(gid))


@dataclass(frozen=True)
class LayerStore:
    cache: Cache

    @property
    def root(self) -> Path:
        path = self.cache.root / "layers"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def tar_path(self, diff_id: str) -> Path:
        return self.root / f"{diff_id.removeprefix('sha256:')}.tar"

    def staging(self, name: str) -> Path:
        """Where a layer is written before it is known by its DiffID (same filesystem: renamed in)."""
        return self.root / f".{name}.{os.getpid()}.tar"

    def find(self, key: str) -> StoredLayer | None:
        try:
            data = json.loads((self.root / "keys" / f"{key}.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        layer = self._stored(data["diff_id"])
        if data.get("v") != STORE_VERSION or layer is None or layer.size != data.get("size"):
            return None
        return layer

    def by_diff_id(self, diff_id: str) -> StoredLayer | None:
        return self._stored(diff_id)

    def _stored(self, diff_id: str) -> StoredLayer | None:
        path = self.tar_path(diff_id)
        entries = path.with_suffix(".entries.gz")
        if not path.is_file() or not entries.is_file():
            return None
        return StoredLayer(diff_id, path, path.stat().st_size, entries)

    def put(self, key: str, written: Path, info: LayerInfo) -> StoredLayer:
        """Move a freshly written tar in under its DiffID and remember ``key`` -> DiffID."""
        target = self.tar_path(info.diff_id)
        entries = target.with_suffix(".entries.gz")
        tmp = entries.with_name(f".{entries.name}.{os.getpid()}")
        # mtime=0 and no file name in the gzip header: the same entries give the same bytes
        with tmp.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as handle:
            handle.write("".join(f"{e.line()}\n" for e in info.entries).encode())
        tmp.replace(entries)
        written.replace(target)
        record = {"v": STORE_VERSION, "diff_id": info.diff_id, "size": info.size}
        atomic.write_text(self.root / "keys" / f"{key}.json", json.dumps(record) + "\n")
        return StoredLayer(info.diff_id, target, info.size, entries)
