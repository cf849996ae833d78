"""An image's root filesystem on a host with no container engine, proven to be the image's.

GPU nodes on clusters rarely run Docker, and a device may not be reachable by any registry. The
image still has to run there, in its own filesystem. Two ways in:

* `materialize`: unpack the image's layer tars in order (what an engine does).
* a *rootfs bundle*: `pack` writes the image's files that the target does not already hold (by
  sha256, from an inventory of the target's installed distributions, whose RECORDs list a sha256
  for every file) as compressed tar groups (zstd by default: `packcodec`) cut into parts, plus
  `rootfs.json` with the image's config and per-file manifest. `apply` (standard library only: it
  runs under the target's own Python) checks every part, unpacks them, copies the reused files from
  where the target has them, checking each one's sha256, and sets modes and owners as the image has
  them.

Either way, `verify_tree` compares the tree with the image's per-file manifest (path, type, mode,
owner, size, sha256): only a tree that matches may carry the image's ID into an acceptance report.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from verlenv import atomic
from verlenv.image import packcodec
from verlenv.image.filemanifest import FileManifest, differences, of_tree
from verlenv.image.tarlayer import DIR, FILE, SYMLINK, Entry

BUNDLE_VERSION = 2  # 2: the codec is named (version 1 packs were xz)
MANIFEST_NAME = "rootfs.json"
CHUNK = 1 << 20
REUSE_MIN_BYTES = 64 << 10  # smaller files travel: not worth a lookup on the target
GROUP_BYTES = 384 << 20  # uncompressed bytes per compressed stream: groups unpack in parallel on the target


class RootfsError(Exception):
    """The tree is not the image's, or a bundle is damaged: the message says which path or part."""


# --- inventory (runs on the target) -------------------------------------------------------------


def inventory(sites: Iterable[Path]) -> dict[str, list[object]]:
    """sha256 -> [path, size] for every file the target's installed distributions list in RECORD
    whose content still is what RECORD says: hosts edit files in place (an H200 host's certifi
    cacert.pem had the site's CA added), and a pack that trusted RECORD would leave them out."""
    found: dict[str, list[object]] = {}
    for site in sites:
        for record in sorted(site.glob("*.dist-info/RECORD")):
            for path, sha, size in _record_lines(record, site):
                if size >= REUSE_MIN_BYTES and sha not in found and _holds(path, sha, size):
                    found[sha] = [str(path), size]
    return found


def _holds(path: Path, sha: str, size: int) -> bool:
    try:
        return path.stat().st_size == size and _file_sha256(path) == sha
    except OSError:
        return False


def tree_inventory(tree: Path, manifest: FileManifest) -> dict[str, list[object]]:
    """sha256 -> [path, size] for the files of an image tree already on the target (proven by
    `apply` when it was made; `apply` proves every reused file again)."""
    # every size: a local copy costs less than carrying the file
    return {e.sha256: [str(tree / e.path), e.size] for e in manifest.entries if e.kind == FILE and e.size}


def _record_lines(record: Path, site: Path) -> Iterator[tuple[Path, str, int]]:
    for line in record.read_text(errors="replace").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) != 3 or not parts[1].startswith("sha256=") or not parts[2].isdigit():
            continue
        raw = parts[1].removeprefix("sha256=")
        sha = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
        yield (site / parts[0]).resolve(), sha, int(parts[2])


# --- packing (build host) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Group:
    name: str
    parts: tuple[Part, ...]
    files: int
    bytes: int  # uncompressed content


@dataclass(frozen=True)
class Bundle:
    image_id: str
    files_sha256: str
    config: str  # the image config, exactly as its ID was computed from
    groups: tuple[Group, ...]
    reuse: tuple[tuple[str, str, int], ...]  # (path in the image, sha256, size) the target supplies
    codec: str = "zstd"

    def to_json(self) -> str:
        data = {"version": BUNDLE_VERSION, **asdict(self)}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Bundle:
        data = json.loads(text)
        if data.get("version") not in (1, BUNDLE_VERSION):
            raise RootfsError(
                f"rootfs bundle version {data.get('version')!r}; this verlenv reads 1 and {BUNDLE_VERSION}"
            )
        groups = tuple(
            Group(g["name"], tuple(Part(**p) for p in g["parts"]), g["files"], g["bytes"]) for g in data["groups"]
        )
        reuse = tuple((p, s, int(n)) for p, s, n in data["reuse"])
        codec = data.get("codec", "xz")
        return cls(data["image_id"], data["files_sha256"], data["config"], groups, reuse, codec)


def pack(
    manifest: FileManifest,
    layers: Sequence[Path],
    config: bytes,
    image_id: str,
    have: dict[str, list[object]],
    out: Path,
    part_bytes: int,
    codec: str = "zstd",
    level: int | None = None,
    keep: Path | None = None,
) -> Bundle:
    """Write the files of ``manifest`` that ``have`` (the target's inventory) lacks into ``out``.

    Files are grouped by the layer they come from, so a group's content (and, in ``keep``, its
    compressed parts) stays the same when another layer changes: packing again after a change to one
    layer compresses only that layer's groups."""
    level = packcodec.DEFAULT_LEVEL.get(codec, 0) if level is None else level
    try:
        packcodec.check_level(codec, level)
    except packcodec.CodecError as exc:
        raise RootfsError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    reuse = tuple(
        (e.path, e.sha256, e.size) for e in manifest.entries if e.kind == FILE and e.size and e.sha256 in have
    )
    reused = {path for path, _, _ in reuse}
    carried = [e for e in manifest.entries if e.kind == FILE and e.path not in reused]
    sources = _sources(layers, {e.path for e in carried})
    groups = []
    for index, members in enumerate(_grouped(carried, sources, layers)):
        name = f"g{index:03d}"
        groups.append(_kept_group(name, members, sources, out, part_bytes, (codec, level), keep))
    bundle = Bundle(image_id, manifest.sha256, config.decode(), tuple(groups), reuse, codec)
    (out / MANIFEST_NAME).write_text(bundle.to_json())
    _write_manifest(manifest, out)
    return bundle


def _write_manifest(manifest: FileManifest, out: Path) -> None:
    manifest.write(out / "files.gz")


def _sources(layers: Sequence[Path], wanted: set[str]) -> dict[str, tuple[Path, int, int]]:
    """path -> (layer tar, data offset, size) of the last layer that has it (later layers win)."""
    found: dict[str, tuple[Path, int, int]] = {}
    for layer in layers:
        with tarfile.open(layer) as tar:
            members = {m.name.rstrip("/"): m for m in tar.getmembers()}
        for path, member in members.items():
            if path not in wanted:
                continue
            data = members[member.linkname] if member.islnk() else member
            found[path] = (layer, data.offset_data, data.size)
    return found


def _grouped(
    entries: list[Entry], sources: dict[str, tuple[Path, int, int]], layers: Sequence[Path]
) -> Iterator[list[Entry]]:
    """Per source layer (bottom first), cut into groups of at most GROUP_BYTES."""
    order = {layer: index for index, layer in enumerate(layers)}
    by_layer: dict[Path, list[Entry]] = {}
    for entry in entries:
        by_layer.setdefault(sources[entry.path][0], []).append(entry)
    for layer in sorted(by_layer, key=order.__getitem__):
        group: list[Entry] = []
        size = 0
        for entry in by_layer[layer]:
            if group and size + entry.size > GROUP_BYTES:
                yield group
                group, size = [], 0
            group.append(entry)
            size += entry.size
        if group:
            yield group


def _kept_group(
    name: str,
    members: list[Entry],
    sources: dict[str, tuple[Path, int, int]],
    out: Path,
    part_bytes: int,
    how: tuple[str, int],
    keep: Path | None,
) -> Group:
    """The group's parts, from ``keep`` when the same files were compressed the same way before."""
    if keep is None:
        return _write_group(name, members, sources, out, part_bytes, how)
    key = hashlib.sha256(
        json.dumps([list(how), part_bytes, [(e.path, e.sha256, e.size, e.mode) for e in members]]).encode()
    ).hexdigest()

    def fill(work: Path) -> None:
        made = _write_group("kept", members, sources, work, part_bytes, how)
        (work / "group.json").write_text(json.dumps(asdict(made)))

    # whole or absent: a folder another pack is reading is never removed under it
    keep.mkdir(parents=True, exist_ok=True)
    folder = atomic.make_folder(keep / key, keep, fill)
    data = json.loads((folder / "group.json").read_text())
    parts = []
    for index, part in enumerate(data["parts"]):
        target = out / f"{name}.tar.{packcodec.SUFFIX[how[0]]}.{index:03d}"
        shutil.copyfile(folder / part["name"], target)
        parts.append(Part(target.name, part["sha256"], part["size"]))
    return Group(name, tuple(parts), data["files"], data["bytes"])


def _write_group(
    name: str,
    members: list[Entry],
    sources: dict[str, tuple[Path, int, int]],
    out: Path,
    part_bytes: int,
    how: tuple[str, int],
) -> Group:
    codec, level = how
    stream = out / f"{name}.tar.{packcodec.SUFFIX[codec]}"
    with (
        packcodec.writer(codec, stream, level) as sink,
        tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in members:
            layer, offset, size = sources[entry.path]
            info = tarfile.TarInfo(entry.path)
            info.size, info.mode = size, entry.mode
            with layer.open("rb") as handle:
                handle.seek(offset)
                tar.addfile(info, _Limited(handle, size))
    parts = _split(stream, part_bytes)
    return Group(name, parts, len(members), sum(e.size for e in members))


class _Limited(io.RawIOBase):
    def __init__(self, handle: io.BufferedReader, size: int) -> None:
        self.handle, self.left = handle, size

    def read(self, size: int = -1) -> bytes:
        want = self.left if size < 0 else min(size, self.left)
        data = self.handle.read(want)
        self.left -= len(data)
        return data


def _split(stream: Path, part_bytes: int) -> tuple[Part, ...]:
    parts = []
    with stream.open("rb") as handle:
        index = 0
        while data := handle.read(part_bytes):
            part = stream.with_name(f"{stream.name}.{index:03d}")
            part.write_bytes(data)
            parts.append(Part(part.name, hashlib.sha256(data).hexdigest(), len(data)))
            index += 1
    stream.unlink()
    return tuple(parts)


# --- applying (the target) -----------------------------------------------------------------------


def apply(bundle_dir: Path, target: Path, have: dict[str, list[object]], workers: int = 8) -> FileManifest:
    """Make ``target`` the image's tree from a bundle and the target's own files; return the manifest."""
    bundle = Bundle.from_json((bundle_dir / MANIFEST_NAME).read_text())
    manifest = FileManifest.read(bundle_dir / "files.gz")
    if manifest.sha256 != bundle.files_sha256:
        raise RootfsError(f"{bundle_dir}/files.gz is not the manifest {bundle.files_sha256} the bundle names")
    try:  # before the parts are hashed: that reads every byte carried
        packcodec.check_readable(bundle.codec)
    except packcodec.CodecError as exc:
        raise RootfsError(str(exc)) from None
    _check_parts(bundle, bundle_dir)
    target.mkdir(parents=True, exist_ok=True)
    _make_dirs(manifest, target)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        count = len(bundle.groups)
        list(pool.map(_unpack_group, [bundle_dir] * count, bundle.groups, [target] * count, [bundle.codec] * count))
    _reuse(bundle, have, target)
    _links_and_modes(manifest, target)
    return manifest


def _check_parts(bundle: Bundle, where: Path) -> None:
    for group in bundle.groups:
        for part in group.parts:
            path = where / part.name
            if not path.is_file():
                raise RootfsError(f"part {part.name} is missing from {where}")
            if _file_sha256(path) != part.sha256:
                raise RootfsError(f"part {part.name} does not have sha256 {part.sha256}: damaged in transit")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _make_dirs(manifest: FileManifest, target: Path) -> None:
    for entry in manifest.entries:
        if entry.kind == DIR:
            (target / entry.path).mkdir(parents=True, exist_ok=True)


def _unpack_group(bundle_dir: Path, group: Group, target: Path, codec: str) -> None:
    parts = [bundle_dir / p.name for p in group.parts]
    with packcodec.reader(codec, parts) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isreg() or member.name.startswith(("/", "..")) or "/../" in member.name:
                raise RootfsError(f"{group.name}: unexpected member {member.name!r}")
            source = tar.extractfile(member)
            assert source is not None
            path = target / member.name
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                shutil.copyfileobj(source, out, CHUNK)


def _reuse(bundle: Bundle, have: dict[str, list[object]], target: Path) -> None:
    for path, sha, size in bundle.reuse:
        found = have.get(sha)
        if not found:
            raise RootfsError(f"{path}: the target was expected to hold a file with sha256 {sha}, and does not")
        source = Path(str(found[0]))
        dest = target / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
        if dest.stat().st_size != size or _file_sha256(dest) != sha:
            raise RootfsError(f"{path}: the target's {source} does not have sha256 {sha}; its RECORD is wrong")


def _links_and_modes(manifest: FileManifest, target: Path) -> None:
    for entry in manifest.entries:
        path = target / entry.path
        if entry.kind == SYMLINK:
            if path.is_symlink() or path.exists():
                path.unlink()
            path.symlink_to(entry.target)
            os.lchown(path, entry.uid, entry.gid)
            continue
        os.chown(path, entry.uid, entry.gid)
        path.chmod(entry.mode)  # after chown: chown clears setuid bits


# --- materializing from layers, and checking a tree ----------------------------------------------


def materialize(layers: Sequence[Path], target: Path) -> None:
    """Unpack layer tars in order into ``target``, as an engine would (verlenv writes no whiteouts)."""
    target.mkdir(parents=True, exist_ok=True)
    for layer in layers:
        with tarfile.open(layer) as tar:
            whiteouts = [m.name for m in tar.getmembers() if Path(m.name).name.startswith(".wh.")]
            if whiteouts:
                raise RootfsError(f"{layer}: whiteout entries ({whiteouts[0]}): not a layer verlenv wrote")
            tar.extractall(target, numeric_owner=True, filter="fully_trusted")


def verify_tree(target: Path, manifest: FileManifest) -> None:
    """Raise RootfsError naming the first paths where ``target`` is not the image's tree."""
    actual = of_tree(target)
    if actual.sha256 == manifest.sha256:
        return
    first = differences(manifest, actual)
    lines = "\n".join(f"  {d.render()}" for d in first)
    raise RootfsError(f"{target} is not the image's tree (manifest {manifest.sha256[:16]}):\n{lines}")


def read_gz_json(path: Path) -> dict[str, list[object]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m verlenv.image.rootfs inventory OUT.json.gz [TREE BUNDLE]... | apply BUNDLE TARGET
    INVENTORY`: the target's side, standard library only. TREE BUNDLE pairs add the files of image
    trees already made there (an extension's build environment), so a pack for a second image
    carries only what the first lacks."""
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["inventory"] and len(args) % 2 == 0:
        import site

        sites = [Path(p) for p in {*site.getsitepackages(), site.getusersitepackages()} if Path(p).is_dir()]
        found = inventory(sites)
        for tree, bundle_dir in zip(args[2::2], args[3::2], strict=True):  # trees of other images made here
            found = {**tree_inventory(Path(tree), FileManifest.read(Path(bundle_dir) / "files.gz")), **found}
        with gzip.open(args[1], "wt", encoding="utf-8") as handle:
            json.dump(found, handle)
        return 0
    if args[:1] == ["apply"] and len(args) == 4:
        manifest = apply(Path(args[1]), Path(args[2]), read_gz_json(Path(args[3])))
        verify_tree(Path(args[2]), manifest)
        print(f"{args[2]}: the image's tree, {len(manifest.entries)} entries, manifest {manifest.sha256}")
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
