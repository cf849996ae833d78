"""Which layers two profiles share: the torch layer of the default vLLM profile and of the SGLang 0.9.1
profile, by the key every layer is stored under (its wheels with their sha256, the base's DiffID,
the locked pip, the snapshot epoch, the install recipe) and, where this machine built it, its DiffID.

    python benchmarks/shared_layers.py [PROFILE_A PROFILE_B]

Equal keys are equal inputs to the same installer and layer writer, which the reproducibility test
shows give equal bytes: the same DiffID, pulled once by a node that runs both images.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from verlenv.image.context import group_layers, requirements_text, source_date_epoch
from verlenv.image.install import Installer, pip_of
from verlenv.image.layerstore import LayerStore
from verlenv.lock.lockfile import read_lock
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache, default_root
from verlenv.wheels.wheelhouse import fill

DEFAULTS = ("verl0.9.1-vllm0.24.0-torch2.11.0-cu130", "verl0.9.1-sglang0.5.12-torch2.11.0-cu130")


def layer_keys(name: str, cache: Cache) -> dict[str, tuple[str, int]]:
    """layer -> (key, wheel count) for a profile, as its build would compute them."""
    paths = find_root()
    profile, lock = load_profile(paths, name), read_lock(paths.lock(name))
    files = list(fill(profile, lock, cache, quiet=True).files)
    installer = Installer(
        None, "", profile.base.diff_id, pip_of(files), source_date_epoch(lock.header.exclude_newer), LayerStore(cache)
    )
    return {
        layer: (installer.key(layer, requirements_text(items)), len(items))
        for layer, items in group_layers(profile, files).items()
        if all(h.is_wheel for h in items)
    }


def main() -> None:
    names = sys.argv[1:3] or list(DEFAULTS)
    cache = Cache(default_root())
    store = LayerStore(cache)
    keys = [layer_keys(name, cache) for name in names]
    print(f"{'layer':14s} {'same key':9s} {names[0][:40]:42s} {names[1][:40]}")
    for layer in sorted(keys[0].keys() | keys[1].keys()):
        a, b = keys[0].get(layer), keys[1].get(layer)
        same = "yes" if a and b and a[0] == b[0] else "no"
        stored = store.find(a[0]) if a else None
        diff = f" DiffID {stored.diff_id[:19]}" if stored and same == "yes" else ""
        describe = [f"{x[1]} wheels, key {x[0][-12:]}" if x else "-" for x in (a, b)]
        print(f"{layer:14s} {same:9s} {describe[0]:42s} {describe[1]}{diff}")


if __name__ == "__main__":
    main()
