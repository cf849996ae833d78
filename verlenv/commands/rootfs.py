"""verlenv rootfs: an image's root filesystem without a container engine, proven to be the image's."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from verlenv.errors import CheckFailed, ConfigError, IntegrityError

NAME = "rootfs"
HELP = (
    "An image's root filesystem on a host with no container engine (HPC GPU nodes). `materialize` unpacks the "
    "image's layers from the build cache into a folder; `pack` writes only the files a target lacks (given the "
    "target's `inventory` of installed distributions) as checked, compressed parts (zstd unless --codec says "
    "otherwise) with the image's config and per-file manifest; `apply` (on the target, standard library only, "
    "and the zstd program for zstd parts: python3 -m verlenv.image.rootfs apply ...) "
    "makes the tree from them; `verify` compares a tree with the image's per-file manifest (path, type, mode, "
    "owner, size, sha256) and exits 6 naming the first paths that differ."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from verlenv.commands.options import add_cache_option, add_profile_option
    from verlenv.image import packcodec

    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    mat = sub.add_parser("materialize", help="unpack a built image's layers into DIR")
    pack = sub.add_parser("pack", help="the files a target lacks, as parts, with the image's manifest")
    verify = sub.add_parser("verify", help="check that DIR is exactly the image's tree")
    inv = sub.add_parser("inventory", help="(on the target) list the files its installed distributions hold")
    apply = sub.add_parser("apply", help="(on the target) make the image's tree from a pack and its own files")
    run = sub.add_parser("run", help="(on the target) run a command in the tree, as accept-image --rootfs does")
    for action in (mat, pack, verify):
        add_profile_option(action, "profile whose built image to use")
        action.add_argument("--image", default="", help="image ID (default: the profile's lockfiles/NAME.image.json)")
        add_cache_option(action)
    mat.add_argument("dir", type=Path)
    pack.add_argument("--have", type=Path, required=True, help="the target's inventory (.json.gz)")
    pack.add_argument("--out", type=Path, required=True, help="folder for rootfs.json, files.gz and the parts")
    pack.add_argument("--part-mib", type=int, default=58, help="largest part in MiB (default 58)")
    pack.add_argument(
        "--codec",
        choices=packcodec.CODECS,
        default="zstd",
        help="compression of the parts (default zstd: the target needs the zstd program or Python's zstandard "
        "module; gzip needs only Python; xz is smallest, and packed 8x slower than zstd on cpu-smoke)",
    )
    pack.add_argument(
        "--level", type=int, help="the codec's level (default: zstd 3, gzip 1, xz 1; zstd 1-19, gzip 1-9, xz 0-9)"
    )
    verify.add_argument("dir", type=Path)
    verify.add_argument("--bundle", type=Path, help="take the manifest from a pack folder instead of the cache")
    inv.add_argument("out", type=Path, help="where to write the inventory (.json.gz)")
    apply.add_argument("bundle", type=Path)
    apply.add_argument("dir", type=Path)
    apply.add_argument("inventory", type=Path)
    for action in (mat, pack, verify, inv, apply):
        action.add_argument("--json", action="store_true", help="machine-readable result")
    run.add_argument("dir", type=Path)
    run.add_argument("--bundle", type=Path, required=True, help="the pack folder: image ID, config env, file manifest")
    run.add_argument("--runner", choices=("auto", "bwrap", "chroot"), default="auto")
    run.add_argument("--scratch", type=Path, required=True, help="writable HOME and mount points")
    run.add_argument("--no-verify", action="store_true", help="skip the file-by-file check (it was just made)")
    run.add_argument("--timeout", type=float, default=3600.0)
    run.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="HOST:DEST",
        help="bind a writable host folder at DEST, which must exist in the tree (repeatable)",
    )
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in the run (repeatable)")
    run.add_argument("command", nargs="*", help="after --: the command, run in the tree")
    run.set_defaults(_passthrough="command")


def execute(args: argparse.Namespace) -> int:
    from verlenv.image import rootfs

    if args.action == "run":
        return _run(args)
    try:
        result = _ACTIONS[args.action](args)
    except rootfs.RootfsError as exc:
        raise IntegrityError(str(exc)) from None
    print(json.dumps(result, indent=1) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


def _image(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from verlenv.commands.options import cache_of, profile_of
    from verlenv.image import expected
    from verlenv.image.build import record_path
    from verlenv.image.stored import stored_image
    from verlenv.paths import find_root

    image_id = args.image
    if not image_id:
        paths = find_root()
        name = profile_of(args, paths)
        record = expected.read(record_path(paths, name))
        if record is None:
            raise ConfigError(f"no lockfiles/{name}.image.json", hint=f"verlenv build --profile {name}")
        image_id = record.image_id
    return stored_image(cache_of(args), image_id)


def _materialize(args: argparse.Namespace) -> dict[str, object]:
    from verlenv.image import rootfs

    image = _image(args)
    rootfs.materialize(image.layer_paths, args.dir)
    rootfs.verify_tree(args.dir, image.manifest())
    return {"image_id": image.image_id, "dir": str(args.dir), "files_sha256": image.manifest().sha256}


def _pack(args: argparse.Namespace) -> dict[str, object]:
    from verlenv.image import rootfs

    image = _image(args)
    have = rootfs.read_gz_json(args.have)
    print(
        f"[rootfs] packing {image.image_id[:19]} for a target holding {len(have)} files, parts in {args.codec}",
        file=sys.stderr,
    )
    started = time.monotonic()
    bundle = rootfs.pack(
        image.manifest(),
        image.layer_paths,
        image.config,
        image.image_id,
        have,
        args.out,
        args.part_mib << 20,
        codec=args.codec,
        level=args.level,
    )
    parts = [p for g in bundle.groups for p in g.parts]
    return {
        "image_id": image.image_id,
        "files_sha256": bundle.files_sha256,
        "reused_files": len(bundle.reuse),
        "reused_bytes": sum(size for _, _, size in bundle.reuse),
        "carried_files": sum(g.files for g in bundle.groups),
        "carried_bytes": sum(g.bytes for g in bundle.groups),
        "codec": bundle.codec,
        "parts": len(parts),
        "parts_bytes": sum(p.size for p in parts),
        "seconds": round(time.monotonic() - started, 1),
    }


def _verify(args: argparse.Namespace) -> dict[str, object]:
    from verlenv.image import rootfs
    from verlenv.image.filemanifest import FileManifest

    if args.bundle:
        bundle = rootfs.Bundle.from_json((args.bundle / rootfs.MANIFEST_NAME).read_text())
        manifest, image_id = FileManifest.read(args.bundle / "files.gz"), bundle.image_id
    else:
        image = _image(args)
        manifest, image_id = image.manifest(), image.image_id
    rootfs.verify_tree(args.dir, manifest)
    return {"image_id": image_id, "dir": str(args.dir), "files_sha256": manifest.sha256, "identical": True}


def _inventory(args: argparse.Namespace) -> dict[str, object]:
    from verlenv.image import rootfs

    code = rootfs.main(["inventory", str(args.out)])
    if code:
        raise CheckFailed("inventory failed")
    return {"inventory": str(args.out), "files": len(rootfs.read_gz_json(args.out))}


def _apply(args: argparse.Namespace) -> dict[str, object]:
    from verlenv.image import rootfs

    manifest = rootfs.apply(args.bundle, args.dir, rootfs.read_gz_json(args.inventory))
    rootfs.verify_tree(args.dir, manifest)
    return {"dir": str(args.dir), "files_sha256": manifest.sha256, "identical": True}


def _run(args: argparse.Namespace) -> int:
    """Its own exit code and output, untouched: doctor's JSON comes through as doctor wrote it."""
    from verlenv.accept.rootfs_run import ImageFacts, pick_runner, plan, run_in_tree
    from verlenv.image import rootfs

    command = [c for c in args.command if c != "--"] or ["bash"]
    try:
        image = ImageFacts.from_bundle(args.bundle)
        if not args.no_verify:
            rootfs.verify_tree(args.dir, image.manifest)
        the_plan = plan(args.dir, image, args.scratch, pick_runner(args.runner), _pairs(args.env, "=", "--env"))
        binds = tuple((Path(host), dest) for host, dest in _pairs(args.bind, ":", "--bind").items())
        proc = run_in_tree(replace(the_plan, extra_binds=binds), command, args.timeout)
    except rootfs.RootfsError as exc:
        raise IntegrityError(str(exc)) from None
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


def _pairs(items: list[str], sep: str, option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key or not value:
            raise ConfigError(f"{option} {item!r}: expected {'KEY=VALUE' if sep == '=' else 'HOST:DEST'}")
        pairs[key] = value
    return pairs


_ACTIONS = {
    "materialize": _materialize,
    "pack": _pack,
    "verify": _verify,
    "inventory": _inventory,
    "apply": _apply,
}
