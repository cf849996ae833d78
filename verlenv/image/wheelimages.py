"""Each layer's wheels as a content-addressed image: packed once, then reused by every build.

The engine's classic builder tars and sends the whole context on every build and hashes every file
in it. For a CUDA profile that is ~6 GB of wheels, though from one build to the next usually only
verlenv's own wheel changed. So each layer's verified wheels are packed into a FROM-scratch image,
tagged by the hash of what it holds (the layer's hashed requirements) and of the cache it was packed
from, and the build copies them with COPY --from: an unchanged layer sends nothing, and its install
step stays cached. Packing re-hashes every file (a tampered cache fails there, naming the file);
pip still installs with --require-hashes, so a wheels image altered in the engine fails the build.
A wheels image is reused only by builds from the cache it was packed from: another cache packs its own.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from pathlib import Path

from verlenv.errors import CheckFailed
from verlenv.image.context import requirements_text, stage_wheels
from verlenv.wheels.cache import Cache
from verlenv.wheels.wheelhouse import HouseFile

REPOSITORY = "verlenv/wheels"
LABEL = "io.verlenv.wheels"  # every wheels image carries it: docker images -f label=io.verlenv.wheels
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def reference(layer: str, items: tuple[HouseFile, ...], cache: Cache) -> str:
    key = hashlib.sha256((requirements_text(items) + str(cache.root.resolve())).encode()).hexdigest()
    return f"{REPOSITORY}:{layer}-{key[:16]}"


def ensure(
    client, layer: str, items: tuple[HouseFile, ...], cache: Cache, *, repack: bool = False, quiet: bool = False
) -> tuple[str, bool]:  # type: ignore[no-untyped-def]
    """(reference, packed now): the layer's wheels image, packed unless one for the same wheels exists."""
    import docker.errors

    ref = reference(layer, items, cache)
    if not repack:
        try:
            client.images.get(ref)
            return ref, False
        except docker.errors.ImageNotFound:
            pass
    _pack(client, layer, items, cache, ref, quiet)
    return ref, True


def _pack(client, layer: str, items: tuple[HouseFile, ...], cache: Cache, ref: str, quiet: bool) -> None:  # type: ignore[no-untyped-def]
    size = sum(h.path.stat().st_size for h in items)
    if not quiet:
        print(
            f"[build] packing the {layer} layer's {len(items)} wheels ({size / 2**30:.2f} GiB) into {ref}",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix=f"verlenv-wheels-{layer}-", dir=cache.tmp) as tmp:
        stage_wheels(Path(tmp) / "wheels", items)
        (Path(tmp) / "Dockerfile").write_text(f"FROM scratch\nCOPY wheels/ /wheels/{layer}/\nLABEL {LABEL}={layer}\n")
        for chunk in client.api.build(path=tmp, tag=ref, network_mode="none", rm=True, forcerm=True, decode=True):
            if "error" in chunk:
                detail = _ANSI.sub("", chunk.get("errorDetail", {}).get("message", chunk["error"]))
                raise CheckFailed(
                    f"packing the {layer} layer's wheels into {ref} failed; nothing was tagged:\n{detail}"
                )
