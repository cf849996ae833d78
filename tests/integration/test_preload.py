"""Prefixes of a stack loaded into the real engine while the rest is still being made: the final load
finds them there and sends only what is missing, the image is the one a plain load gives, and the
prefix images are gone afterwards, success or failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verlenv.errors import ServiceError
from verlenv.image import oci
from verlenv.image.preload import LABEL, Preloader
from verlenv.image.tarlayer import tree_items, write_layer

EPOCH = 1790294400


def _stack(tmp_path: Path, count: int) -> list[oci.Layer]:
    layers = []
    for index in range(count):
        tree = tmp_path / f"tree{index}"
        (tree / f"layer{index}").mkdir(parents=True)
        (tree / f"layer{index}" / "data.txt").write_text(f"layer {index} of a preload test ({tmp_path.name})\n")
        info = write_layer(tree_items(tree), tmp_path / f"layer{index}.tar", EPOCH)
        layers.append(oci.Layer(info.diff_id, tmp_path / f"layer{index}.tar", f"layer {index}"))
    return layers


def _name(tmp_path: Path) -> str:
    # The engine is shared with whatever else runs on the host (a build's own preloads, another
    # test session): count only this test's prefix images.
    return f"preload-test-{os.getpid()}-{tmp_path.name}"


def _preload_images(engine, name: str) -> list:  # type: ignore[no-untyped-def, type-arg]
    return engine.images.list(all=True, filters={"label": f"{LABEL}={name}"})


def test_prefixes_loaded_early_make_the_final_load_send_only_the_rest(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layers = _stack(tmp_path, 3)
    spec = oci.ImageSpec(env=(("A", "1"),), labels=(("test", tmp_path.name),), epoch=EPOCH)
    config = oci.config_bytes(spec, layers)
    chains = oci.chain_ids([layer.diff_id for layer in layers])
    with Preloader(engine, _name(tmp_path), EPOCH) as preloader:
        preloader.offer(layers[:1])
        preloader.offer(layers[:2])
        preloader.offer(layers[:1])  # shorter than what was offered: nothing to do
        preloader.wait()
        present = oci.present_chains(engine)
        assert chains[0] in present and chains[1] in present and chains[2] not in present
        assert len(_preload_images(engine, _name(tmp_path))) == 2
        sent = b"".join(oci.archive_stream(config, layers, present))
        assert layers[2].path.read_bytes()[:512] in sent and layers[0].path.read_bytes()[:512] not in sent
        image_id = oci.load(engine, config, layers)
    try:
        assert image_id == oci.image_id(config)
        assert _preload_images(engine, _name(tmp_path)) == []
        assert engine.images.get(image_id).attrs["RootFS"]["Layers"] == [layer.diff_id for layer in layers]
    finally:
        engine.images.remove(image_id, force=True)


def test_a_failed_preload_is_raised_and_its_images_still_go(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layers = _stack(tmp_path, 2)
    broken = oci.Layer("sha256:" + "0" * 64, layers[1].path, "a layer whose DiffID is wrong")
    with pytest.raises(ServiceError), Preloader(engine, _name(tmp_path), EPOCH) as preloader:
        preloader.offer(layers[:1])
        preloader.offer([layers[0], broken])
        preloader.wait()
    assert _preload_images(engine, _name(tmp_path)) == []
