"""Cold build of a profile, then rebuilds after changing only the top layer or the verl pin, as ratios.

    python benchmarks/build_bench.py [--profile NAME] [--no-verl-pin]

Cold = no layer cache (`nocache`), base image reused (it is made once per machine; its own time
is printed when it has to be made). Rebuild = a copy of the project with cpu-smoke's verl pin
moved 0.9.1 -> 0.9.0, locked and verified for real, then built with the layer cache: only the
verl layer and those above it are rebuilt. Top layer = the verlenv layer: a copy of the project
whose verlenv source differs by one comment line. Target: top-layer rebuild / cold <= 0.15.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# The project copies come from the test helpers: run from anywhere, import them from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.variants import copy_project, repin
from verlenv.image.build import BuildOptions, build_image
from verlenv.image.services import ensure_engine
from verlenv.lock.lockfile import read_lock
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache, default_root
from verlenv.wheels.wheelhouse import fill


def _stages(timings: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())


def _build(paths, profile: str, cache: Cache, nocache: bool):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = build_image(paths, profile, cache, BuildOptions(quiet=True, nocache=nocache))
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-smoke")
    parser.add_argument("--no-verl-pin", action="store_true", help="skip the verl-pin variant (lock + verify)")
    args = parser.parse_args()
    paths = find_root()
    cache = Cache(default_root())
    fill(load_profile(paths, args.profile), read_lock(paths.lock(args.profile)), cache, quiet=True)
    cold, cold_s = _build(paths, args.profile, cache, nocache=True)
    print(f"cold build                 {cold_s:7.1f} s  ({_stages(cold.timings)})")
    print(f"image size                 {cold.size / 2**30:7.2f} GiB ({cold.size:,} bytes)")
    with tempfile.TemporaryDirectory() as tmp:
        top = copy_project(paths, Path(tmp) / "top")
        init = top.root / "verlenv" / "__init__.py"
        init.write_text(init.read_text() + "# benchmark: a change in the top layer only\n")
        top_result, top_s = _build(top, args.profile, cache, nocache=False)
        print(f"rebuild, top layer changed {top_s:7.1f} s  ({_stages(top_result.timings)})")
        print(f"top-layer rebuild / cold   {top_s / cold_s:7.3f}")
        if args.no_verl_pin:
            return
        variant = repin(paths, Path(tmp) / "variant", args.profile, "verl", "0.9.0", cache)
        warm, warm_s = _build(variant, args.profile, cache, nocache=False)
    print(f"rebuild, verl pin changed  {warm_s:7.1f} s  ({_stages(warm.timings)})")
    print(f"verl-pin rebuild / cold    {warm_s / cold_s:7.3f}")
    engine = ensure_engine()
    cold_layers, warm_layers = (engine.images.get(r.image_id).attrs["RootFS"]["Layers"] for r in (cold, warm))
    shared = sum(a == b for a, b in zip(cold_layers, warm_layers, strict=False))
    print(f"layers shared              {shared} of {len(warm_layers)}")


if __name__ == "__main__":
    main()
