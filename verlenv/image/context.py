"""The build context: rendered Dockerfile, manifest.json, and the wheels of every layer that is not
packed into a wheels image (image/wheelimages.py) - in practice verlenv's own, the one that changes."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from string import Template

from verlenv import __version__
from verlenv.errors import IntegrityError
from verlenv.image.manifest import Manifest
from verlenv.lock.tools import run, uv_binary
from verlenv.profiles.profile import LAYER_ORDER, Profile
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.wheelhouse import HouseFile

VENV = "/opt/venv"


@dataclass(frozen=True)
class Context:
    path: Path
    manifest: Manifest
    layers: dict[str, tuple[HouseFile, ...]]
    size: int


def source_date_epoch(exclude_newer: str) -> int:
    """SOURCE_DATE_EPOCH from the lock's snapshot timestamp (e.g. 2026-09-25T00:00:00Z)."""
    return int(dt.datetime.fromisoformat(exclude_newer.replace("Z", "+00:00")).timestamp())


def group_layers(profile: Profile, files: list[HouseFile]) -> dict[str, tuple[HouseFile, ...]]:
    layers: dict[str, list[HouseFile]] = {layer: [] for layer in LAYER_ORDER}
    for house in files:
        layers[profile.layer_of(house.name)].append(house)
    return {layer: tuple(sorted(items, key=lambda h: h.name)) for layer, items in layers.items() if items}


def requirements_text(items: tuple[HouseFile, ...]) -> str:
    return "".join(f"{h.name}=={h.version} --hash=sha256:{h.sha256}\n" for h in items)


def stage_wheels(folder: Path, items: tuple[HouseFile, ...]) -> int:
    """Link ``items`` into ``folder`` beside their hashed requirements.txt, each re-hashed on the way."""
    folder.mkdir(parents=True)
    (folder / "requirements.txt").write_text(requirements_text(items))
    # hashlib releases the GIL: re-hashing several GB of CUDA wheels scales with the cores.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return sum(pool.map(lambda house: _link_verified(house, folder / house.filename), items))


def assemble(
    where: Path,
    profile: Profile,
    base_ref: str,
    files: list[HouseFile],
    manifest: Manifest,
    template: Path,
    packed: dict[str, str] | None = None,
) -> Context:
    """Write the context into ``where`` (emptied first). Layers in ``packed`` (layer -> wheels image)
    are copied from those images; the others' wheels go into the context, re-hashed on the way in."""
    packed = packed or {}
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    layers = group_layers(profile, files)
    size = sum(stage_wheels(where / "layers" / layer, items) for layer, items in layers.items() if layer not in packed)
    (where / "manifest.json").write_text(manifest.to_json())
    (where / "Dockerfile").write_text(
        render_dockerfile(template, profile.name, base_ref, list(layers), manifest.source_date_epoch, packed)
    )
    return Context(where, manifest, layers, size)


def _link_verified(house: HouseFile, target: Path) -> int:
    actual = sha256_of(house.path)
    if actual != house.sha256:
        raise IntegrityError(
            f"{house.path}: sha256 is {actual}, the lock says {house.sha256}; nothing was built or tagged",
            hint="the cached wheel was altered; delete it and re-run `verlenv verify` to fetch it again",
        )
    try:
        os.link(house.path, target)
    except OSError:  # another filesystem: copy
        shutil.copy2(house.path, target)
    return target.stat().st_size


# One builder step per layer: offline, hash-checked install into /layers/NAME, then byte-compile
# with the final path recorded (-s/-p) and hash-based .pyc validation (mtimes do not matter).
# Some wheels carry files for newer Pythons (torch's py312_intrinsics.py) that cannot compile;
# like pip's own compile step, those are skipped (-qq, status ignored), the install is not.
# --ignore-installed: installing into a prefix must never uninstall the builder venv's own pip.
# A packed layer's wheels come from its wheels image (COPY --from an image: cached by its content).
_BUILDER_STEP = """FROM builder AS layer-{layer}
COPY {source} /wheels/{layer}/
RUN {venv}/bin/pip install --no-index --no-deps --require-hashes --no-compile --ignore-installed \\
        --no-warn-script-location --find-links /wheels/{layer} --prefix {prefix} \\
        -r /wheels/{layer}/requirements.txt \\
 && ({venv}/bin/python -m compileall -qq -j 0 --invalidation-mode unchecked-hash \\
        -s {prefix} -p {venv} {prefix} || true)"""
_FINAL_STEP = "COPY --from=layer-{layer} {prefix}/ {venv}/"


def render_dockerfile(
    template: Path, profile: str, base_ref: str, layers: list[str], epoch: int, packed: dict[str, str] | None = None
) -> str:
    packed = packed or {}
    steps = [
        {
            "layer": layer,
            "prefix": f"/layers/{layer}",
            "venv": VENV,
            "source": f"--from={packed[layer]} /wheels/{layer}/" if layer in packed else f"layers/{layer}/",
        }
        for layer in layers
    ]
    return Template(template.read_text()).substitute(
        profile=profile,
        base=base_ref,
        venv=VENV,
        source_date_epoch=epoch,
        builder_steps="\n\n".join(_BUILDER_STEP.format(**step) for step in steps),
        final_steps="\n".join(_FINAL_STEP.format(**step) for step in steps),
    )


def verlenv_wheel(root: Path, cache: Cache, epoch: int) -> HouseFile:
    """verlenv itself, as a wheel built from this checkout: it becomes the last layer.

    Built with SOURCE_DATE_EPOCH so an unchanged checkout gives the same bytes and the layer is reused.
    """
    out = Path(tempfile.mkdtemp(prefix="verlenv-wheel-", dir=cache.tmp))
    run(
        [uv_binary(), "build", "--wheel", "--out-dir", str(out), str(root)],
        what="building the verlenv wheel",
        env={"SOURCE_DATE_EPOCH": str(epoch)},
    )
    [wheel] = list(out.glob("verlenv-*.whl"))
    return HouseFile("verlenv", __version__, wheel.name, sha256_of(wheel), wheel)
