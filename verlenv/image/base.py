"""`verlenv base`: the Debian base as a layer and an image, pinned by its .debs and its DiffID.

The first run resolves the base's packages from the mirror and records every .deb (name, version,
arch, sha256) in images/bases.toml; every later run, on any machine, makes the layer from exactly
those files and checks that it comes out with the recorded DiffID. The image the engine gets (for
the install containers of a build) has a config written here, so its ID is reproducible too.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import CheckFailed, ConfigError, IntegrityError
from verlenv.image import debbase, debs, oci
from verlenv.image.layerstore import StoredLayer
from verlenv.image.services import ensure_engine
from verlenv.profiles.bases import Base, BaseFacts, load_bases, record_base
from verlenv.verify.basefacts import LIB_DIRS, rootfs_facts
from verlenv.wheels.cache import Cache

ENV = (("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), ("LANG", "C.UTF-8"))


@dataclass(frozen=True)
class BaseImage:
    name: str
    reference: str  # repository:diffid12, in the engine
    image_id: str
    layer: StoredLayer
    epoch: int
    resolved: bool  # the debs were (re-)resolved from the mirror in this run
    facts: BaseFacts
    debs: tuple[str, ...] = ()  # "NAME VERSION ARCH sha256:HEX" of every .deb in the layer


def reference(base: Base, diff_id: str) -> str:
    return f"{base.image}:{diff_id.removeprefix('sha256:')[:16]}"


def base_layer(base: Base) -> oci.Layer:
    return oci.Layer(base.diff_id, Path(), f"verlenv base {base.name}: {len(base.debs)} Debian packages")


def make_base(
    bases_file: Path, name: str, cache: Cache, *, mirror: str = "", update: bool = False, quiet: bool = False
) -> BaseImage:
    base = _debian_base(bases_file, name)
    resolved = update or not base.debs or base.recipe != debbase.recipe_hash(base)
    if resolved:
        _say(f"resolving {name}'s packages from the mirror (its .debs are recorded in {bases_file.name})", quiet)
        found = debbase.resolve(base, debbase.host_sources(base.suite, mirror or base.mirror), cache, quiet)
        record_base(
            bases_file,
            name,
            {
                "recipe": debbase.recipe_hash(base),
                "epoch": debbase.resolution_epoch(),
                "debs": [d.line() for d in found],
            },
        )
        base = load_bases(bases_file)[name]
    layer = debbase.make_layer(base, cache, quiet, mirror)
    if base.diff_id and base.diff_id != layer.diff_id and not resolved:
        raise IntegrityError(
            f"base '{name}' came out as layer {layer.diff_id}, but {bases_file.name} records {base.diff_id} "
            "for the same .debs: the base is not reproducible on this machine",
            hint=f"compare with `verlenv image-diff` against a machine that made {base.diff_id[:19]}",
        )
    facts = base.facts if base.diff_id == layer.diff_id and base.facts.libraries else _facts(layer)
    if base.diff_id != layer.diff_id or facts != base.facts:
        record_base(bases_file, name, _facts_record(layer.diff_id, facts))
        base = load_bases(bases_file)[name]
    image_id = _load(base, layer)
    return BaseImage(name, reference(base, layer.diff_id), image_id, layer, base.epoch, resolved, facts, base.debs)


def _debian_base(bases_file: Path, name: str) -> Base:
    bases = load_bases(bases_file)
    if name not in bases:
        raise ConfigError(f"{bases_file}: no base named '{name}'", hint=f"bases: {', '.join(sorted(bases))}")
    base = bases[name]
    if base.kind != "debian":
        raise ConfigError(f"base '{name}' is a {base.kind} base; only debian bases are made here")
    return base


def _facts_record(diff_id: str, facts: BaseFacts) -> dict[str, str | int | list[str]]:
    return {"diff_id": diff_id, "glibc": facts.glibc, "glibcxx": facts.glibcxx, "libraries": sorted(facts.libraries)}


def _facts(layer: StoredLayer) -> BaseFacts:
    """The libraries and glibc/libstdc++ versions the layer provides (its library folders, unpacked)."""
    with tempfile.TemporaryDirectory(prefix="verlenv-basefacts-") as tmp, tarfile.open(layer.path) as tar:
        wanted = [m for m in tar.getmembers() if any(m.name.startswith(d + "/") for d in LIB_DIRS)]
        tar.extractall(tmp, members=wanted, filter="tar")
        return rootfs_facts(Path(tmp))


def _load(base: Base, layer: StoredLayer) -> str:
    client = ensure_engine()
    spec = oci.ImageSpec(env=ENV, labels=(("io.verlenv.base", base.name),), epoch=base.epoch)
    layers = [oci.Layer(layer.diff_id, layer.path, base_layer(base).created_by)]
    config = oci.config_bytes(spec, layers)
    wanted = oci.image_id(config)
    ref = reference(base, layer.diff_id)
    try:
        client.images.get(wanted)
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: load it
        oci.load(client, config, layers)
    repository, tag = ref.rsplit(":", 1)
    client.api.tag(wanted, repository, tag)
    return wanted


def check_mirror(bases_file: Path, name: str, mirror: str = "") -> list[str]:
    """The recorded .debs the mirror has moved on from: 'NAME recorded -> offered now'."""
    base = _debian_base(bases_file, name)
    if not base.debs:
        raise CheckFailed(f"base '{name}' has no recorded .debs yet", hint=f"verlenv base {name}")
    if base.recipe != debbase.recipe_hash(base):
        raise CheckFailed(
            f"base '{name}': its package list changed since the .debs were recorded",
            hint=f"verlenv base {name} --update",
        )
    offers = debs.mirror_offers(debbase.host_sources(base.suite, mirror or base.mirror))
    moved = []
    for line in base.debs:
        deb = debs.Deb.parse(line, f"bases.{name}.debs")
        newest = debs.newest(o.version for o in offers.get((deb.name, deb.arch), []))
        if newest and newest != deb.version:
            moved.append(f"{deb.name} {deb.version} -> {newest}")
        elif not newest:
            moved.append(f"{deb.name} {deb.version} -> (gone from the mirror)")
    return moved


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[base] {message}", file=sys.stderr, flush=True)
