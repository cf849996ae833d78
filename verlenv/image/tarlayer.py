"""Image layers as normalized tars: the same tree gives the same bytes on any machine.

What the classic builder stamps (build-time mtimes, the builder's uid, the umask, readdir order)
never reaches a layer written here: entries are sorted by path; every mtime is the lock's snapshot
epoch; no atime, ctime or fractional times; owners are 0/0 with empty names unless a source says
otherwise (the Debian base keeps the owners its packages declare); hard links point at the first
path of their group; no xattrs. The DiffID is the sha256 of exactly the bytes written, and every
regular file's own sha256 is recorded on the way, which gives the image's per-file manifest.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, BinaryIO

CHUNK = 1 << 20
FILE, DIR, SYMLINK, HARDLINK = "file", "dir", "symlink", "hardlink"
_TYPES = {FILE: tarfile.REGTYPE, DIR: tarfile.DIRTYPE, SYMLINK: tarfile.SYMTYPE, HARDLINK: tarfile.LNKTYPE}


@dataclass(frozen=True)
class Entry:
    """One path of a layer, as the per-file manifest records it."""

    path: str  # relative, no leading "./" or "/", no trailing "/"
    kind: str  # file | dir | symlink | hardlink
    mode: int  # permission and special bits (no file-type bits)
    size: int = 0
    sha256: str = ""  # regular files only
    target: str = ""  # symlink target, or the path a hard link points at
    uid: int = 0
    gid: int = 0

    def line(self) -> str:
        """A stable one-line form: what two trees must agree on, field for field."""
        return (
            f"{self.path}\t{self.kind}\t{self.mode:o}\t{self.uid}:{self.gid}\t{self.size}\t{self.sha256}\t{self.target}"
        )


Opener = Callable[[], BinaryIO]


@dataclass(frozen=True)
class Item:
    """An entry to write and, for a regular file, how to open its content."""

    entry: Entry
    open: Opener | None = None


@dataclass(frozen=True)
class LayerInfo:
    diff_id: str  # sha256:<hex> of the uncompressed tar
    size: int
    entries: tuple[Entry, ...]


def canonical_mode(mode: int, is_dir: bool) -> int:
    """The umask never matters: 0755 for directories and anything executable, 0644 otherwise.

    Special bits (setuid, setgid, sticky) mean the mode was chosen on purpose: kept as it is."""
    bits = stat.S_IMODE(mode)
    if bits & 0o7000:
        return bits
    return 0o755 if is_dir or bits & 0o111 else 0o644


def tree_items(root: Path, prefix: str = "") -> list[Item]:
    """Every path under ``root`` as items at ``prefix``, owners 0/0 and canonical modes."""
    items = [Item(Entry(parent, DIR, 0o755)) for parent in _parents(prefix)]
    if prefix:
        items.append(Item(Entry(prefix, DIR, 0o755)))
    found = sorted(_walk(str(root), ""), key=lambda pair: pair[1].encode())
    first: dict[tuple[int, int], str] = {}  # in final (sorted) order: a link never precedes its target
    for full, rel, info in found:
        items.append(_tree_item(full, info, f"{prefix}/{rel}" if prefix else rel, first))
    return items


def _walk(full: str, rel: str) -> Iterator[tuple[str, str, os.stat_result]]:
    with os.scandir(full) as listing:
        for child in listing:
            child_rel = f"{rel}/{child.name}" if rel else child.name
            info = child.stat(follow_symlinks=False)
            yield child.path, child_rel, info
            if stat.S_ISDIR(info.st_mode):
                yield from _walk(child.path, child_rel)


def _tree_item(full: str, info: os.stat_result, path: str, first: dict[tuple[int, int], str]) -> Item:
    if stat.S_ISDIR(info.st_mode):
        return Item(Entry(path, DIR, canonical_mode(info.st_mode, True)))
    if stat.S_ISLNK(info.st_mode):
        return Item(Entry(path, SYMLINK, 0o777, target=str(Path(full).readlink())))
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{full}: not a regular file, directory or symlink; layers hold nothing else")
    mode = canonical_mode(info.st_mode, False)
    if info.st_nlink > 1:
        key = (info.st_dev, info.st_ino)
        if key in first:
            return Item(Entry(path, HARDLINK, mode, target=first[key]))
        first[key] = path
    return Item(Entry(path, FILE, mode, size=info.st_size), lambda: open(full, "rb"))  # noqa: PTH123


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1] if path else []
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def tar_items(tar: tarfile.TarFile, keep: Callable[[str], bool] = lambda _: True) -> list[Item]:
    """The kept members of a seekable tar as items, owners and modes as the tar says; hard links
    re-pointed at the first kept path of their group, so sorting never puts a link before its target
    and dropping a path never leaves a link to nothing."""
    members = {path: m for m in tar.getmembers() if (path := _clean(m.name))}
    kept = {path: m for path, m in members.items() if keep(path)}
    groups = _link_groups(kept)
    return [_tar_item(tar, path, member, members, groups) for path, member in kept.items()]


def _clean(name: str) -> str:
    name = name.removeprefix("./").lstrip("/").rstrip("/")
    return "" if name == "." else name


def _link_groups(kept: dict[str, tarfile.TarInfo]) -> dict[str, str]:
    """path -> the smallest kept path holding the same data (for every kept member of a link group)."""
    groups: dict[str, list[str]] = {}
    for path, member in kept.items():
        if member.islnk():
            target = _clean(member.linkname)
            groups.setdefault(target, [target] if target in kept else []).append(path)
    return {path: min(group) for group in groups.values() for path in group}


def _tar_item(
    tar: tarfile.TarFile,
    path: str,
    member: tarfile.TarInfo,
    members: dict[str, tarfile.TarInfo],
    groups: dict[str, str],
) -> Item:
    owner = {"mode": stat.S_IMODE(member.mode), "uid": member.uid, "gid": member.gid}
    if member.isdir():
        return Item(Entry(path, DIR, **owner))
    if member.issym():
        return Item(Entry(path, SYMLINK, target=member.linkname, **owner))
    first = groups.get(path, path)
    if first != path:
        return Item(Entry(path, HARDLINK, target=first, **owner))
    data = members[_clean(member.linkname)] if member.islnk() else member
    if not data.isreg():
        raise ValueError(f"{path}: a {member.type!r} member; layers hold files, directories and links only")
    return Item(Entry(path, FILE, size=data.size, **owner), lambda: tar.extractfile(data))  # type: ignore[return-value]


class _HashingWriter:
    """A write-only file that hashes and counts what passes through to ``out``."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.out.write(data)

    def tell(self) -> int:
        return self.size


class _HashingReader:
    def __init__(self, source: BinaryIO) -> None:
        self.source = source
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.digest.update(data)
        return data


def write_layer(items: Iterable[Item], out: Path, epoch: int) -> LayerInfo:
    """Write ``items`` sorted by path to ``out``; later items of the same path win."""
    chosen = {item.entry.path: item for item in items}
    written: list[Entry] = []
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            sink = _HashingWriter(handle)
            with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK) as tar:  # type: ignore[call-overload]
                for path in sorted(chosen, key=lambda p: p.encode()):
                    written.append(_add(tar, chosen[path], epoch))
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return LayerInfo(f"sha256:{sink.digest.hexdigest()}", sink.size, tuple(written))


def _add(tar: tarfile.TarFile, item: Item, epoch: int) -> Entry:
    entry = item.entry
    info = tarfile.TarInfo(entry.path)
    info.type = _TYPES[entry.kind]
    info.mode, info.uid, info.gid, info.uname, info.gname = entry.mode, entry.uid, entry.gid, "", ""
    info.mtime = epoch
    info.linkname = entry.target
    if entry.kind != FILE:
        tar.addfile(info)
        return entry
    assert item.open is not None
    with item.open() as source:
        reader = _HashingReader(source)
        info.size = entry.size
        tar.addfile(info, reader)  # type: ignore[arg-type]
    return replace(entry, sha256=reader.digest.hexdigest())
