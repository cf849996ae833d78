"""One layer installed by one pip against several pips at once, alternating, same wheels, same run.

    python benchmarks/parallel_pip_bench.py [--profile NAME] [--layer deps] [--reps 2]

Each install is the build's own (a container of the profile's base, no network, hash-checked,
bytecode compiled) with nothing reused (--no-cache); the layer bytes must come out identical.
Prints the seconds of each run (install + tar) and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from verlenv.image import install
from verlenv.image.base import make_base
from verlenv.image.build import _wheels
from verlenv.image.context import group_layers
from verlenv.image.layerstore import LayerStore
from verlenv.image.pipgroups import install_groups
from verlenv.image.services import ensure_engine
from verlenv.lock.lockfile import read_lock
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache, default_root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-smoke")
    parser.add_argument("--layer", default="deps")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    paths, cache = find_root(), Cache(default_root())
    profile = load_profile(paths, args.profile)
    files = _wheels(paths, profile, read_lock(paths.lock(args.profile)), cache)
    items = tuple(h for h in group_layers(profile, files)[args.layer] if h.is_wheel)
    base = make_base(paths.bases, profile.base.name, cache, quiet=True)
    groups = install_groups(items, install.MAX_PIPS)
    print(f"{args.profile} {args.layer}: {len(items)} wheels, {len(groups)} groups of {[len(g) for g in groups]}")
    seconds: dict[int, list[float]] = {1: [], install.MAX_PIPS: []}
    digests = set()
    for rep in range(args.reps):
        for pips in seconds:
            install.MAX_PIPS = pips
            with tempfile.TemporaryDirectory(dir=cache.tmp) as tmp:
                scratch = Cache(Path(tmp))
                installer = install.Installer(
                    ensure_engine(), base.reference, base.layer.diff_id, install.pip_of(files), 0,
                    LayerStore(scratch), fresh=True,
                )  # fmt: skip
                started = time.perf_counter()
                layer = install.wheels_layer(installer, scratch, args.layer, items)
                seconds[pips].append(time.perf_counter() - started)
                digests.add(layer.diff_id)
            print(f"rep {rep + 1}, {pips} pip(s): {seconds[pips][-1]:6.1f} s  {layer.diff_id[:19]}")
    one, many = (statistics.median(v) for v in seconds.values())
    print(f"median: 1 pip {one:.1f} s, {max(seconds)} pips {many:.1f} s, ratio {many / one:.2f}")
    print("layer bytes identical" if len(digests) == 1 else f"LAYERS DIFFER: {sorted(digests)}")


if __name__ == "__main__":
    main()
