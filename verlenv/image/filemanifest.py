"""The per-file manifest of an image: every path of the merged layers with its type, mode, owner, size
and sha256. Computed on the build host from the layers and stored by image ID; a root filesystem
materialized anywhere (a GPU node without a container engine) must produce the same lines, which is
how a report made there is tied to this image and no other."""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from verlenv.image.tarlayer import DIR, FILE, HARDLINK, SYMLINK, Entry

CHUNK = 1 << 20
# Mount points a runner may create in a materialized tree to bind host paths in: not part of identity.
RUNTIME_PATHS = ("usr/local/nvidia",)


@dataclass(frozen=True)
class FileManifest:
    entries: tuple[Entry, ...]  # sorted by path; hard links resolved to the file they share data with

    # Computed once: a build asks for the text three times (sha256, record, file), ~0.2 s each for an
    # image of 130,000 paths.
    @functools.cached_property
    def text(self) -> str:
        return "".join(f"{e.line()}\n" for e in self.entries)

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def write(self, path: Path) -> None:
        """Gzipped at level 1: the file is read back by its text's sha256, never by its own bytes, and
        level 9 took half a second of each rebuild."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1) as out:
            out.write(self.text.encode())
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> FileManifest:
        from verlenv.image.layerstore import parse_entry

        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return cls(tuple(parse_entry(line) for line in handle.read().splitlines()))


def merge(layers: Sequence[Iterable[Entry]]) -> FileManifest:
    """The image's view: later layers win path by path (verlenv writes no whiteouts)."""
    merged: dict[str, Entry] = {}
    for entries in layers:
        for entry in entries:
            merged[entry.path] = entry
    resolved = {path: _resolve(entry, merged) for path, entry in merged.items()}
    return FileManifest(tuple(resolved[p] for p in sorted(resolved, key=str.encode)))


def _resolve(entry: Entry, merged: dict[str, Entry]) -> Entry:
    """A hard link is, in a tree, a regular file: record it as one, with its target's content."""
    if entry.kind != HARDLINK:
        return entry
    target = merged[entry.target]
    return replace(entry, kind=FILE, size=target.size, sha256=target.sha256, target="")


def of_tree(root: Path, skip: tuple[str, ...] = RUNTIME_PATHS, workers: int = 0) -> FileManifest:
    """The manifest of a materialized tree, hashing every regular file (on all cores: hashlib
    releases the GIL, and an image is ~10 GiB)."""
    found = [
        (full, rel, info)
        for full, rel, info in _walk(str(root), "")
        if not any(rel == s or rel.startswith(f"{s}/") for s in skip)
    ]
    with ThreadPoolExecutor(max_workers=workers or (os.cpu_count() or 2)) as pool:
        entries = list(pool.map(lambda item: _entry_of(*item), found))
    return FileManifest(tuple(sorted(entries, key=lambda e: e.path.encode())))


def _walk(full: str, rel: str) -> Iterable[tuple[str, str, os.stat_result]]:
    with os.scandir(full) as listing:
        for child in listing:
            child_rel = f"{rel}/{child.name}" if rel else child.name
            info = child.stat(follow_symlinks=False)
            yield child.path, child_rel, info
            if stat.S_ISDIR(info.st_mode):
                yield from _walk(child.path, child_rel)


def _entry_of(full: str, rel: str, info: os.stat_result) -> Entry:
    owner = {"mode": stat.S_IMODE(info.st_mode), "uid": info.st_uid, "gid": info.st_gid}
    if stat.S_ISDIR(info.st_mode):
        return Entry(rel, DIR, **owner)
    if stat.S_ISLNK(info.st_mode):
        return Entry(rel, SYMLINK, target=str(Path(full).readlink()), **owner)
    if stat.S_ISREG(info.st_mode):
        return Entry(rel, FILE, size=info.st_size, sha256=_sha256(full), **owner)
    return Entry(rel, f"special-{stat.S_IFMT(info.st_mode):o}", **owner)


def _sha256(full: str) -> str:
    digest = hashlib.sha256()
    with open(full, "rb") as handle:  # noqa: PTH123 - hot path
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


_COMPARED = (("kind", "type"), ("sha256", "content"), ("size", "size"), ("mode", "mode"), ("target", "target"))


@dataclass(frozen=True)
class Difference:
    path: str
    what: str  # missing | extra | content | mode | owner | type | target | size

    def render(self) -> str:
        return f"{self.what:8s} {self.path}"


def differences(expected: FileManifest, actual: FileManifest, limit: int = 20) -> list[Difference]:
    """The first paths where two manifests disagree, each with what differs."""
    want = {e.path: e for e in expected.entries}
    have = {e.path: e for e in actual.entries}
    found = []
    for path in sorted(want.keys() | have.keys(), key=str.encode):
        what = _what_differs(want.get(path), have.get(path))
        if what:
            found.append(Difference(path, what))
            if len(found) >= limit:
                break
    return found


def _what_differs(want: Entry | None, have: Entry | None) -> str:
    if want is None:
        return "extra"
    if have is None:
        return "missing"
    for field, name in (
        ("kind", "type"),
        ("sha256", "content"),
        ("size", "size"),
        ("mode", "mode"),
        ("target", "target"),
    ):
        if getattr(want, field) != getattr(have, field):
            return name
    return "owner" if (want.uid, want.gid) != (have.uid, have.gid) else ""
