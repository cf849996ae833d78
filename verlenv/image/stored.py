"""An image as the build left it in the cache: its config bytes, its layer tars (by DiffID) and its
per-file manifest. Enough to push it blob by blob, unpack it, or pack it for a host with no engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import ConfigError, IntegrityError
from verlenv.image.build import config_path, files_manifest_path
from verlenv.image.filemanifest import FileManifest
from verlenv.image.layerstore import LayerStore, StoredLayer
from verlenv.image.oci import image_id as digest_of
from verlenv.wheels.cache import Cache


@dataclass(frozen=True)
class StoredImage:
    image_id: str
    config: bytes
    layers: tuple[StoredLayer, ...]
    manifest_path: Path

    def manifest(self) -> FileManifest:
        return FileManifest.read(self.manifest_path)

    @property
    def layer_paths(self) -> list[Path]:
        return [layer.path for layer in self.layers]


def stored_image(cache: Cache, image_id: str) -> StoredImage:
    """The image ``image_id`` from the cache; ConfigError (saying how to get it) when a piece is gone."""
    config_file = config_path(cache, image_id)
    if not config_file.is_file():
        raise ConfigError(
            f"image {image_id[:19]} was not built with this cache ({cache.root})",
            hint="build it here: verlenv build --profile NAME (the same lock gives the same image ID)",
        )
    config = config_file.read_bytes()
    if digest_of(config) != image_id:
        raise IntegrityError(f"{config_file}: its sha256 is not {image_id}: the cache was altered")
    store = LayerStore(cache)
    layers = []
    for diff_id in json.loads(config)["rootfs"]["diff_ids"]:
        layer = store.by_diff_id(diff_id)
        if layer is None:
            raise ConfigError(f"layer {diff_id[:19]} of image {image_id[:19]} is gone from the layer store")
        layers.append(layer)
    return StoredImage(image_id, config, tuple(layers), files_manifest_path(cache, image_id))
