"""What the ELF check read in an environment, kept beside its manifest so a later doctor re-reads only
what changed.

The image build's self-check (and `verlenv venv`) records, for every shared object it read, the
file's size and mtime with what was read from it (dynamic section, symbol tables for torch's
libraries and their consumers), plus the verdicts. A later run stats every shared object again:
when the set of files, their sizes and mtimes and the base facts are all unchanged, the recorded
verdicts are the answer; otherwise only the changed or new files are read again and the verdicts are
recomputed from the recorded facts of the rest, so a file changed after the build is always read.
Size and mtime, not inode: a pulled image's layers are unpacked anew (new inodes) but keep both.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from verlenv.profiles.bases import BaseFacts
from verlenv.verify.abi import Finding, ObjectVerdict, SharedObject, TorchFacts
from verlenv.verify.elf import ElfInfo
from verlenv.verify.objscan import ObjectError

CACHE_VERSION = 1
Key = tuple[int, int]  # (size, mtime_ns)


def stat_key(full: str) -> Key:
    stat = os.stat(full)  # noqa: PTH116 - tens of thousands of calls: no Path objects
    return stat.st_size, stat.st_mtime_ns


def base_key(base: BaseFacts) -> str:
    blob = json.dumps([sorted(base.libraries), base.glibc, base.glibcxx])
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Remembered:
    """A recorded scan: file keys, the base it was judged against, the verdicts, and (lazily) the facts."""

    summary_path: Path
    objects_path: Path
    keys: dict[str, Key]
    base: str
    torch: TorchFacts | None
    verdicts: tuple[ObjectVerdict, ...]
    errors: tuple[ObjectError, ...]

    def facts(self) -> dict[str, SharedObject | ObjectError]:
        """full path -> what was read from it (the large part; loaded only when something changed)."""
        try:
            with gzip.open(self.objects_path, "rt", encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError, EOFError):
            return {}
        return {full: _item_from_json(item) for full, item in data.items()}


def paths_for(manifest: Path) -> tuple[Path, Path]:
    """The record of an environment, beside its manifest: manifest.json -> elfscan.json (images),
    verlenv-manifest.json -> verlenv-elfscan.json (venvs), plus the objects file."""
    name = manifest.name.replace("manifest.json", "elfscan")
    return manifest.with_name(f"{name}.json"), manifest.with_name(f"{name}-objects.json.gz")


def load(manifest: Path) -> Remembered | None:
    summary, objects = paths_for(manifest)
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != CACHE_VERSION:
        return None
    torch = data["torch"]
    return Remembered(
        summary,
        objects,
        {full: (key[0], key[1]) for full, key in data["keys"].items()},
        data["base"],
        TorchFacts(torch["version"], torch["abi"], frozenset()) if torch else None,
        tuple(_verdict_from_json(v) for v in data["verdicts"]),
        tuple(ObjectError(*e) for e in data["errors"]),
    )


def save(
    manifest: Path,
    keys: dict[str, Key],
    base: BaseFacts,
    items: dict[str, SharedObject | ObjectError],
    torch: TorchFacts | None,
    verdicts: tuple[ObjectVerdict, ...],
    errors: tuple[ObjectError, ...],
) -> Path:
    summary, objects = paths_for(manifest)
    # The build keeps this record as a layer of the image: the same scan must give the same bytes
    # (sorted keys and lists, no time or file name in the gzip header).
    text = json.dumps({full: _item_to_json(item) for full, item in items.items()}, sort_keys=True)
    with objects.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=3) as out:
        out.write(text.encode())
    payload = {
        "version": CACHE_VERSION,
        "keys": keys,
        "base": base_key(base),
        "torch": {"version": torch.version, "abi": torch.abi} if torch else None,
        "verdicts": [asdict(v) for v in sorted(verdicts, key=lambda v: (v.path, v.owner))],
        "errors": sorted([e.owner, e.path, e.error] for e in errors),
    }
    summary.write_text(json.dumps(payload, sort_keys=True))  # written last: a summary always has its objects file
    return summary


def _item_to_json(item: SharedObject | ObjectError) -> dict[str, Any]:
    if isinstance(item, ObjectError):
        return {"owner": item.owner, "path": item.path, "error": item.error}
    return {"owner": item.owner, "path": item.path, "elf": item.info.to_json()}


def _item_from_json(data: dict[str, Any]) -> SharedObject | ObjectError:
    if "error" in data:
        return ObjectError(data["owner"], data["path"], data["error"])
    return SharedObject(data["owner"], data["path"], ElfInfo.from_json(data["elf"]))


def _verdict_from_json(data: dict[str, Any]) -> ObjectVerdict:
    findings = tuple(
        Finding(f["kind"], f["message"], f["fix"], tuple(f["examples"]), f["count"]) for f in data["findings"]
    )
    return ObjectVerdict(
        data["owner"],
        data["path"],
        tuple(data["torch_needs"]),
        findings,
        data["abi"],
        data["checked_symbols"],
        data["excused"],
    )
