"""Shared objects inside wheels, with their ELF facts cached by the wheel's sha256."""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from dataclasses import dataclass

from verlenv.abicheck import SharedObject
from verlenv.cache import Cache
from verlenv.elf import ElfInfo
from verlenv.objscan import SKIP_PREFIXES, ObjectError, is_shared_object, read_object
from verlenv.wheelhouse import HouseFile

SCAN_VERSION = 1  # bump when what is cached changes


@dataclass(frozen=True)
class WheelScan:
    owner: str
    names: tuple[str, ...]  # basenames of every shared object in the wheel
    objects: tuple[SharedObject, ...]
    errors: tuple[ObjectError, ...]
    from_cache: bool


def scan_wheel(house: HouseFile, cache: Cache) -> WheelScan:
    owner = f"{house.name} {house.version}"
    cached = cache.load_symbols(house.sha256)
    if cached and cached.get("scan_version") == SCAN_VERSION:
        return _from_json(owner, cached)
    with zipfile.ZipFile(house.path) as archive:
        members = [n for n in archive.namelist() if is_shared_object(n)]
        results = [_read_member(archive, owner, m, cache) for m in members if not m.startswith(SKIP_PREFIXES)]
    scan = WheelScan(
        owner=owner,
        names=tuple(sorted({m.rsplit("/", 1)[-1] for m in members})),
        objects=tuple(r for r in results if isinstance(r, SharedObject)),
        errors=tuple(r for r in results if isinstance(r, ObjectError)),
        from_cache=False,
    )
    cache.save_symbols(house.sha256, _to_json(scan))
    return scan


def _read_member(archive: zipfile.ZipFile, owner: str, member: str, cache: Cache) -> SharedObject | ObjectError:
    # pyelftools seeks all over the file: inflate to a temp file first, never into memory.
    with tempfile.TemporaryFile(dir=cache.tmp) as tmp:
        with archive.open(member) as source:
            shutil.copyfileobj(source, tmp, 1 << 20)
        tmp.seek(0)
        return read_object(owner, member, tmp)


def _to_json(scan: WheelScan) -> dict:  # type: ignore[type-arg]
    return {
        "scan_version": SCAN_VERSION,
        "names": list(scan.names),
        "objects": [{"path": o.path, "elf": o.info.to_json()} for o in scan.objects],
        "errors": [[e.path, e.error] for e in scan.errors],
    }


def _from_json(owner: str, data: dict) -> WheelScan:  # type: ignore[type-arg]
    return WheelScan(
        owner=owner,
        names=tuple(data["names"]),
        objects=tuple(SharedObject(owner, o["path"], ElfInfo.from_json(o["elf"])) for o in data["objects"]),
        errors=tuple(ObjectError(owner, p, e) for p, e in data["errors"]),
        from_cache=True,
    )
