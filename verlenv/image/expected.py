"""lockfiles/NAME.image.json: what a profile's image must come out as, committed and checked.

The record holds the image ID, the config verlenv wrote, every layer's DiffID and a hash per group
of paths (a site-packages distribution, a top-level folder of the base), plus the hash of the
inputs it was built from. A build from the same inputs that comes out different fails, naming the
layer, the groups and (when the other layer is at hand) the first paths that differ and how.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import ConfigError
from verlenv.image.filemanifest import FileManifest, differences
from verlenv.image.tarlayer import Entry

RECORD_SCHEMA_VERSION = 1
_SITE = "opt/venv/lib/python3.11/site-packages/"


@dataclass(frozen=True)
class LayerRecord:
    name: str
    diff_id: str
    size: int
    groups: dict[str, str]  # path group -> sha256 of its entries' lines


@dataclass(frozen=True)
class ImageRecord:
    profile: str
    lock_sha256: str
    inputs_sha256: str
    image_id: str
    files_sha256: str
    config: dict[str, Any]
    layers: list[LayerRecord] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"schema_version": RECORD_SCHEMA_VERSION, **asdict(self)}, indent=1, sort_keys=True) + "\n"


def group_of(path: str) -> str:
    if path.startswith(_SITE):
        rest = path[len(_SITE) :].split("/", 1)[0]
        return _SITE + rest
    return "/".join(path.split("/")[:2])


def groups(entries: Iterable[Entry]) -> dict[str, str]:
    found: dict[str, hashlib._Hash] = {}
    for entry in entries:
        found.setdefault(group_of(entry.path), hashlib.sha256()).update(f"{entry.line()}\n".encode())
    return {name: digest.hexdigest() for name, digest in sorted(found.items())}


def read(path: Path) -> ImageRecord | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})", hint="restore it from version control") from None
    if data.get("schema_version") != RECORD_SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {data.get('schema_version')!r}, expected {RECORD_SCHEMA_VERSION}")
    fields = {k: v for k, v in data.items() if k != "schema_version"}
    fields["layers"] = [LayerRecord(**layer) for layer in fields.get("layers", [])]
    return ImageRecord(**fields)


def write(path: Path, record: ImageRecord) -> None:
    atomic.write_text(path, record.to_json())


def explain(expected: ImageRecord, actual: ImageRecord, entries_of: dict[str, Sequence[Entry]]) -> list[str]:
    """Lines saying where ``actual`` departs from ``expected``: config keys, layers, groups, paths.

    ``entries_of`` maps a DiffID to its entries when that layer is at hand (this machine made it)."""
    lines = [f"image {actual.image_id} where {expected.image_id} was expected"]
    lines += [f"  config: {key} differs" for key in _config_keys(expected.config, actual.config)]
    for index, (want, have) in enumerate(_pairs(expected.layers, actual.layers)):
        if want and have and want.diff_id == have.diff_id:
            continue
        name = (have or want).name  # type: ignore[union-attr]
        before, after = (want.diff_id[:19] if want else "none"), (have.diff_id[:19] if have else "none")
        lines.append(f"  layer {index} ({name}): {before} -> {after}")
        if want and have:
            lines += _group_lines(want, have)
            lines += _path_lines(want, have, entries_of)
    return lines


def _pairs(left: list[LayerRecord], right: list[LayerRecord]) -> list[tuple[LayerRecord | None, LayerRecord | None]]:
    size = max(len(left), len(right))
    return [(left[i] if i < len(left) else None, right[i] if i < len(right) else None) for i in range(size)]


def _config_keys(left: dict[str, Any], right: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key in sorted(left.keys() | right.keys()):
        a, b = left.get(key), right.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += _config_keys(a, b, f"{prefix}{key}.")
        elif a != b and key not in ("rootfs", "history"):
            keys.append(f"{prefix}{key}")
    return keys


def _group_lines(want: LayerRecord, have: LayerRecord, limit: int = 10) -> list[str]:
    changed = []
    for name in sorted(want.groups.keys() | have.groups.keys()):
        a, b = want.groups.get(name), have.groups.get(name)
        if a != b:
            state = "missing" if b is None else "extra" if a is None else "differs"
            changed.append(f"    {state:8s} {name}")
    return changed[:limit] + ([f"    ... {len(changed) - limit} more groups"] if len(changed) > limit else [])


def _path_lines(want: LayerRecord, have: LayerRecord, entries_of: dict[str, Sequence[Entry]]) -> list[str]:
    if want.diff_id not in entries_of or have.diff_id not in entries_of:
        return ["    (the expected layer is not in this machine's store: paths unknown)"]
    first = differences(FileManifest(tuple(entries_of[want.diff_id])), FileManifest(tuple(entries_of[have.diff_id])))
    if not first:
        return ["    every path agrees in type, content, mode, owner and target: the tar headers differ (mtimes?)"]
    return [f"      {d.render()}" for d in first]
