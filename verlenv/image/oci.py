"""The image config, written by verlenv, and loading an image into the engine as a docker-archive.

The engine stores the config bytes it is given, so the image ID is the sha256 of what
:func:`config_bytes` returns: a function of the layers' DiffIDs and of values derived from the lock,
never of the clock, the host or a container ID. Layers the engine already holds (same chain of
DiffIDs) are left out of the archive: the engine looks a layer up by its ChainID before it opens
the file, so a rebuild streams only the layers that changed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import ServiceError

CHUNK = 1 << 20
BLOCK = 512


@dataclass(frozen=True)
class Layer:
    diff_id: str  # sha256:<hex>
    path: Path  # the uncompressed tar
    created_by: str  # one line of history: what made this layer


@dataclass(frozen=True)
class ImageSpec:
    """Everything the config says besides the layers."""

    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    cmd: tuple[str, ...] = ("/bin/bash",)
    epoch: int = 0
    working_dir: str = "/"


def rfc3339(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def config_bytes(spec: ImageSpec, layers: Sequence[Layer]) -> bytes:
    created = rfc3339(spec.epoch)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "Env": [f"{key}={value}" for key, value in spec.env],
            "Cmd": list(spec.cmd),
            "Labels": dict(sorted(spec.labels)),
            "WorkingDir": spec.working_dir,
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": layer.created_by} for layer in layers],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def image_id(config: bytes) -> str:
    return f"sha256:{hashlib.sha256(config).hexdigest()}"


def chain_ids(diff_ids: Sequence[str]) -> list[str]:
    """The OCI ChainIDs of a layer stack: how an engine names 'these layers, in this order'."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chain = diff_id if not chains else f"sha256:{hashlib.sha256(f'{chains[-1]} {diff_id}'.encode()).hexdigest()}"
        chains.append(chain)
    return chains


def present_chains(client) -> set[str]:  # type: ignore[no-untyped-def]
    """ChainIDs of every layer stack the engine's images are made of."""
    found: set[str] = set()
    for summary in client.api.images(all=True):
        try:
            layers = client.api.inspect_image(summary["Id"]).get("RootFS", {}).get("Layers") or []
        except Exception:  # noqa: BLE001 - an image removed meanwhile: its layers do not count
            continue
        found.update(chain_ids(layers))
    return found


def archive_stream(config: bytes, layers: Sequence[Layer], skip: set[str], tag: str = "") -> Iterator[bytes]:
    """A docker-archive of the image as a byte stream; layers whose ChainID is in ``skip`` are not sent."""
    config_name = f"{image_id(config).removeprefix('sha256:')}.json"
    names = [f"{layer.diff_id.removeprefix('sha256:')}/layer.tar" for layer in layers]
    manifest = [{"Config": config_name, "RepoTags": [tag] if tag else None, "Layers": names}]
    yield from _member(config_name, config)
    for layer, name, chain in zip(layers, names, chain_ids([layer.diff_id for layer in layers]), strict=True):
        if chain not in skip:
            yield from _file_member(name, layer.path)
    yield from _member("manifest.json", json.dumps(manifest, separators=(",", ":")).encode())
    yield b"\0" * (BLOCK * 2)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def _member(name: str, data: bytes) -> Iterator[bytes]:
    yield _header(name, len(data))
    yield data
    yield _padding(len(data))


def _file_member(name: str, path: Path) -> Iterator[bytes]:
    size = path.stat().st_size
    yield _header(name, size)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk
    yield _padding(size)


def load(client, config: bytes, layers: Sequence[Layer]) -> str:  # type: ignore[no-untyped-def]
    """Load the image; return its ID (which is the config's digest, checked)."""
    wanted = image_id(config)
    skip = present_chains(client)
    try:
        _send(client, archive_stream(config, layers, skip))
    except ServiceError:
        if not skip:
            raise
        _send(client, archive_stream(config, layers, set()))  # a layer vanished meanwhile: send them all
    loaded = str(client.images.get(wanted).id)
    if loaded != wanted:
        raise ServiceError(f"the engine stored image {loaded}, not {wanted}: it rewrote the config")
    return loaded


def forget(client, image_id: str) -> None:  # type: ignore[no-untyped-def]
    """Remove an image verlenv loaded for its own use; one already gone, still used by a container,
    or now also named by another image stays, which is harmless for every caller."""
    with contextlib.suppress(Exception):
        client.images.remove(image_id, force=True, noprune=False)


def _send(client, stream: Iterator[bytes]) -> None:  # type: ignore[no-untyped-def]
    for message in client.api.load_image(stream):
        if "error" in message:
            detail = message.get("errorDetail", {}).get("message", message["error"])
            raise ServiceError(f"the engine refused the image: {detail}")
