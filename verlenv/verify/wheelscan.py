"""Shared objects inside wheels, with their ELF facts cached by the wheel's sha256."""

from __future__ import annotations

import os
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from verlenv.verify.abi import SharedObject
from verlenv.verify.elf import ElfInfo
from verlenv.verify.objscan import SKIP_PREFIXES, ObjectError, is_shared_object, read_object
from verlenv.wheels.cache import Cache
from verlenv.wheels.inflate import member_chunks
from verlenv.wheels.wheelhouse import HouseFile

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
        infos = sorted((i for i in archive.infolist() if is_shared_object(i.filename)), key=lambda i: -i.file_size)
    members = [i.filename for i in infos]
    wanted = [i for i in infos if not i.filename.startswith(SKIP_PREFIXES)]  # largest first: better packing
    # Inflating is the cost (libtorch_cuda.so: ~5 s alone) and zlib releases the GIL: use every core.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda m: _read_member(house.path, owner, m, cache), wanted))
    scan = WheelScan(
        owner=owner,
        names=tuple(sorted({m.rsplit("/", 1)[-1] for m in members})),
        objects=tuple(r for r in results if isinstance(r, SharedObject)),
        errors=tuple(r for r in results if isinstance(r, ObjectError)),
        from_cache=False,
    )
    cache.save_symbols(house.sha256, _to_json(scan))
    return scan


def _read_member(wheel: Path, owner: str, member: zipfile.ZipInfo, cache: Cache) -> SharedObject | ObjectError | None:
    # pyelftools seeks all over the file: inflate to a temp file first, never into memory.
    with tempfile.TemporaryFile(dir=cache.tmp) as tmp:
        try:
            for chunk in member_chunks(wheel, member):
                tmp.write(chunk)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            return ObjectError(owner, member.filename, f"cannot inflate from the wheel: {exc}")
        tmp.seek(0)
        return read_object(owner, member.filename, tmp)


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
