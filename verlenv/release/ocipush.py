"""Push an image verlenv assembled itself (config JSON + uncompressed layer tars) over HTTP, blob by blob.

The registry manifest digest is reproducible because every byte in it is: the config is the
caller's, each layer is gzipped here deterministically, and the manifest is serialized the way
Docker writes schema-2 manifests (3-space indent, keys in Docker's order).

Deterministic gzip: Python's zlib (raw deflate, level 6, 15-bit window, memLevel 8, default
strategy) inside a fixed 10-byte gzip header: no FNAME/FEXTRA/FCOMMENT, MTIME 0, XFL 0, OS 255
("unknown", what Python's GzipFile and Go's compress/gzip write; zlib's own gzip wrapper, and so
``gzip.compress`` since 3.11, writes 3). The output equals what ``gzip.GzipFile(fileobj=f,
mode="wb", compresslevel=6, mtime=0, filename="")`` writes. Deflate output is fixed for one zlib build;
another zlib version may compress differently, so the compressed blob of each DiffID is cached
(``<cache>/blobs/sha256/<hex>``, index ``<cache>/diffids/sha256/<hex>.json``) and a second publish
reuses it instead of recompressing. The DiffIDs and the image ID do not depend on zlib at all.

Nothing is tagged unless every blob arrived: the manifest PUT is the last request.
"""

from __future__ import annotations

import hashlib
import json
import struct
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import ConfigError, IntegrityError
from verlenv.release import attachment
from verlenv.release.attachment import Descriptor
from verlenv.release.regclient import RegistryClient, sha256_digest

SCHEMA2_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CONTAINER_CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
GZIP_LEVEL = 6
GZIP_HEADER = bytes((0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 255))  # magic, deflate, no flags, mtime 0, xfl 0, OS 255
CHUNK = 1 << 20


@dataclass(frozen=True)
class LayerBlob:
    diff_id: str  # sha256 of the uncompressed tar
    digest: str  # sha256 of the gzip stream, what the registry stores
    size: int
    path: Path  # the compressed blob in the cache


@dataclass(frozen=True)
class PushedImage:
    repository: str
    tag: str
    digest: str  # the registry manifest digest
    manifest: bytes
    config_digest: str  # the image ID
    layers: tuple[LayerBlob, ...]
    uploaded: int  # blobs that had to be sent (0 on a re-push)

    @property
    def descriptor(self) -> Descriptor:
        return Descriptor(SCHEMA2_MANIFEST, self.digest, len(self.manifest))


@dataclass(frozen=True)
class PushedAttachment:
    tag: str
    digest: str


def push_image(
    client: RegistryClient, repository: str, tag: str, config: bytes, layers: Sequence[Path], cache: Path
) -> PushedImage:
    """Upload what the registry lacks, then PUT the schema-2 manifest under ``tag``; its digest."""
    diff_ids = _diff_ids(config, len(layers))
    blobs = tuple(compressed_layer(layer, cache, expected) for layer, expected in zip(layers, diff_ids, strict=True))
    config_digest = sha256_digest(config)
    uploaded = int(client.upload_blob(repository, config_digest, config))
    for blob in blobs:
        uploaded += client.upload_blob(repository, blob.digest, blob.path)
    body = schema2_manifest(Descriptor(CONTAINER_CONFIG, config_digest, len(config)), blobs)
    digest = client.put_manifest(repository, tag, body, SCHEMA2_MANIFEST)
    return PushedImage(repository, tag, digest, body, config_digest, blobs, uploaded)


def push_attachment(
    client: RegistryClient, repository: str, subject: Descriptor, report: dict[str, Any]
) -> PushedAttachment:
    """Push the acceptance report for ``subject`` as an OCI artifact tagged sha256-<hex>.acceptance."""
    config, layer = attachment.blobs(subject.digest, report)
    for blob in (config, layer):
        client.upload_blob(repository, sha256_digest(blob), blob)
    tag = attachment.attachment_tag(subject.digest)
    body = attachment.manifest(subject, config, layer, report)
    return PushedAttachment(tag, client.put_manifest(repository, tag, body, attachment.OCI_MANIFEST))


def schema2_manifest(config: Descriptor, layers: Sequence[LayerBlob]) -> bytes:
    """Docker's schema-2 manifest, byte for byte as dockerd would serialize the same descriptors."""
    body = {
        "schemaVersion": 2,
        "mediaType": SCHEMA2_MANIFEST,
        "config": _docker_descriptor(config),
        "layers": [_docker_descriptor(Descriptor(LAYER_GZIP, b.digest, b.size)) for b in layers],
    }
    return json.dumps(body, indent=3).encode()


def _docker_descriptor(descriptor: Descriptor) -> dict[str, Any]:
    return {"mediaType": descriptor.media_type, "size": descriptor.size, "digest": descriptor.digest}


def _diff_ids(config: bytes, count: int) -> list[str]:
    try:
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError("the image config has no rootfs.diff_ids; it is not an image config") from None
    if len(diff_ids) != count:
        raise ConfigError(f"the image config lists {len(diff_ids)} layers, {count} layer files were given")
    return [str(d) for d in diff_ids]


def compressed_layer(layer: Path, cache: Path, expected_diff_id: str = "") -> LayerBlob:
    """The cached gzip blob of ``layer`` (made now if the cache has none); its DiffID is checked."""
    diff_id = _sha256_file(layer)
    if expected_diff_id and diff_id != expected_diff_id:
        raise IntegrityError(
            f"layer {layer} has DiffID {diff_id}, the image config says {expected_diff_id}",
            hint="the layer file changed after the config was written; rebuild the image",
        )
    cached = _cached(cache, diff_id)
    return cached if cached is not None else _compress_into(layer, cache, diff_id)


def _cached(cache: Path, diff_id: str) -> LayerBlob | None:
    index = _index_path(cache, diff_id)
    try:
        entry = json.loads(index.read_text())
        blob = _blob_path(cache, entry["digest"])
        if blob.stat().st_size == entry["size"]:
            return LayerBlob(diff_id, entry["digest"], entry["size"], blob)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no entry, or a stale one: compress again
    return None


def _compress_into(layer: Path, cache: Path, diff_id: str) -> LayerBlob:
    directory = cache / "blobs" / "sha256"
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".gzip.", delete=False) as handle:
        temp = Path(handle.name)
        try:
            digest, size = deterministic_gzip(layer, handle)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    blob = _blob_path(cache, digest)
    temp.replace(blob)
    entry = {"digest": digest, "size": size, "gzip_level": GZIP_LEVEL, "zlib": zlib.ZLIB_RUNTIME_VERSION}
    atomic.write_text(_index_path(cache, diff_id), json.dumps(entry, sort_keys=True) + "\n")
    return LayerBlob(diff_id, digest, size, blob)


def deterministic_gzip(source: Path, out: Any) -> tuple[str, int]:
    """Write the gzip stream of ``source`` to the binary file ``out``; (sha256 digest, size)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY)
    hasher, crc, length, written = hashlib.sha256(), 0, 0, 0

    def emit(data: bytes) -> None:
        nonlocal written
        hasher.update(data)
        out.write(data)
        written += len(data)

    emit(GZIP_HEADER)
    with source.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            crc, length = zlib.crc32(chunk, crc), length + len(chunk)
            emit(compressor.compress(chunk))
    emit(compressor.flush() + struct.pack("<II", crc & 0xFFFFFFFF, length & 0xFFFFFFFF))
    return "sha256:" + hasher.hexdigest(), written


def _sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
    return "sha256:" + hasher.hexdigest()


def _blob_path(cache: Path, digest: str) -> Path:
    return cache / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _index_path(cache: Path, diff_id: str) -> Path:
    return cache / "diffids" / "sha256" / f"{diff_id.removeprefix('sha256:')}.json"
