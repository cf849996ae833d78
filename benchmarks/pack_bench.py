"""`verlenv rootfs pack` and `apply` of one built image with each codec, against xz in the same run.

    python benchmarks/pack_bench.py [--profile NAME | --image ID] [--have INVENTORY] [--codecs zstd,gzip,xz]

Packs the image's files that the inventory lacks (all of them with no --have) once per codec at
its default level, applies each pack to a fresh folder (proving the tree), and prints seconds and
bytes with ratios to xz. What it answers: how long a GPU trip waits on the build host, and how
many device calls the parts take (58 MiB a call).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from verlenv.image import packcodec, rootfs
from verlenv.image.stored import stored_image
from verlenv.wheels.cache import Cache, default_root

CALL_BYTES = 58 << 20


def _image_id(profile: str, image: str) -> str:
    if image:
        return image
    from verlenv.image import expected
    from verlenv.image.build import record_path
    from verlenv.paths import find_root

    record = expected.read(record_path(find_root(), profile))
    if record is None:
        raise SystemExit(f"no lockfiles/{profile}.image.json: build the profile first")
    return record.image_id


def _one(image, have: dict, codec: str, work: Path) -> dict[str, float]:  # type: ignore[no-untyped-def,type-arg]
    pack_dir, tree = work / f"pack-{codec}", work / f"tree-{codec}"
    started = time.monotonic()
    bundle = rootfs.pack(
        image.manifest(), image.layer_paths, image.config, image.image_id, have, pack_dir, CALL_BYTES, codec
    )
    packed = time.monotonic() - started
    started = time.monotonic()
    rootfs.verify_tree(tree, rootfs.apply(pack_dir, tree, have))
    applied = time.monotonic() - started
    parts = sum(p.size for g in bundle.groups for p in g.parts)
    raw = sum(g.bytes for g in bundle.groups)
    shutil.rmtree(tree)
    shutil.rmtree(pack_dir)
    return {"pack_s": packed, "apply_s": applied, "bytes": parts, "raw": raw, "calls": -(-parts // CALL_BYTES)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu-smoke")
    parser.add_argument("--image", default="")
    parser.add_argument("--have", type=Path, help="the target's inventory (default: none, every file travels)")
    parser.add_argument("--codecs", default=",".join(packcodec.CODECS))
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temp dir)")
    args = parser.parse_args()
    image = stored_image(Cache(default_root()), _image_id(args.profile, args.image))
    have = rootfs.read_gz_json(args.have) if args.have else {}
    codecs = args.codecs.split(",")
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        results = {codec: _one(image, have, codec, Path(scratch)) for codec in codecs}
    ref = results.get("xz")
    print(f"image {image.image_id[:19]}, {len(have)} files on the target")
    print(f"{'codec':6} {'level':>5} {'pack s':>8} {'apply s':>8} {'MB':>9} {'of raw':>7} {'calls':>6} {'pack/xz':>8}")
    for codec, r in results.items():
        ratio = f"{r['pack_s'] / ref['pack_s']:.3f}" if ref else "-"
        print(
            f"{codec:6} {packcodec.DEFAULT_LEVEL[codec]:>5} {r['pack_s']:8.1f} {r['apply_s']:8.1f} "
            f"{r['bytes'] / 1e6:9.1f} {r['bytes'] / r['raw']:7.3f} {r['calls']:6.0f} {ratio:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
