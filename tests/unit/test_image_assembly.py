"""The pieces of the reproducible image, without an engine: the config and its ID, ChainIDs, the
docker-archive stream, the torch layer split, the per-file manifest and the committed record's diff."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from tests.helpers.fakewheels import build_wheel, sha256
from verlenv.image import expected, oci
from verlenv.image.context import group_layers, source_sha256
from verlenv.image.filemanifest import FileManifest, differences, merge, of_tree
from verlenv.image.tarlayer import DIR, FILE, HARDLINK, Entry, tree_items, write_layer
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.wheels.wheelhouse import HouseFile

SPEC = oci.ImageSpec(env=(("PATH", "/bin"), ("LANG", "C.UTF-8")), labels=(("b", "2"), ("a", "1")), epoch=1790294400)


def _layer(tmp_path: Path, name: str, files: dict[str, bytes]) -> oci.Layer:
    tree = tmp_path / f"tree-{name}"
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    info = write_layer(tree_items(tree), tmp_path / f"{name}.tar", SPEC.epoch)
    return oci.Layer(info.diff_id, tmp_path / f"{name}.tar", f"layer {name}")


def test_the_config_is_a_function_of_its_inputs_and_the_id_is_its_digest(tmp_path: Path) -> None:
    layers = [_layer(tmp_path, "a", {"x": b"1"}), _layer(tmp_path, "b", {"y": b"2"})]
    config = oci.config_bytes(SPEC, layers)
    assert config == oci.config_bytes(SPEC, layers)
    assert oci.image_id(config) == "sha256:" + hashlib.sha256(config).hexdigest()
    body = json.loads(config)
    assert body["created"] == "2026-09-25T00:00:00Z" and body["history"][0]["created"] == "2026-09-25T00:00:00Z"
    assert "container" not in body and "container_config" not in body and "hostname" not in body["config"]
    assert body["config"]["Labels"] == {"a": "1", "b": "2"}
    assert body["rootfs"]["diff_ids"] == [layer.diff_id for layer in layers]
    relabeled = oci.ImageSpec(env=SPEC.env, labels=(("a", "other"),), epoch=SPEC.epoch)
    assert oci.image_id(oci.config_bytes(relabeled, layers)) != oci.image_id(config)


def test_chain_ids_follow_the_oci_definition() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    chain = oci.chain_ids([a, b])
    assert chain[0] == a
    assert chain[1] == "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()


def test_the_archive_leaves_out_layers_the_engine_has(tmp_path: Path) -> None:
    layers = [_layer(tmp_path, "a", {"x": b"1"}), _layer(tmp_path, "b", {"y": b"2"})]
    config = oci.config_bytes(SPEC, layers)
    have = {oci.chain_ids([layers[0].diff_id])[0]}
    data = b"".join(oci.archive_stream(config, layers, have))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    hex_a, hex_b = (layer.diff_id.removeprefix("sha256:") for layer in layers)
    assert f"{hex_b}/layer.tar" in names and f"{hex_a}/layer.tar" not in names
    assert manifest[0]["Layers"] == [f"{hex_a}/layer.tar", f"{hex_b}/layer.tar"]
    assert manifest[0]["Config"] in names


def _house(tmp_path: Path, name: str, version: str, requires: list[str] = ()) -> HouseFile:  # type: ignore[assignment]
    wheel = build_wheel(tmp_path, name, version, {f"{name.replace('-', '_')}/__init__.py": b""}, list(requires))
    return HouseFile(name, version, wheel.name, sha256(wheel), wheel)


def test_the_torch_layer_holds_only_what_torch_needs(tmp_path: Path, repo_paths: ProjectPaths) -> None:
    profile = load_profile(repo_paths, "verl0.9.1-vllm0.24.0-torch2.11.0-cu130")
    files = [
        _house(tmp_path, "torch", "2.11.0", ['cuda-toolkit[cublas]==13.0.2; platform_system == "Linux"', "filelock"]),
        _house(tmp_path, "cuda-toolkit", "13.0.2", ['nvidia-cublas==13.0.0; extra == "cublas"']),
        _house(tmp_path, "nvidia-cublas", "13.0.0"),
        _house(tmp_path, "nvidia-cuda-nvcc", "13.2.86"),  # a compiler vLLM's stack wants, torch does not
        _house(tmp_path, "torchvision", "0.26.0", ["torch==2.11.0"]),
        _house(tmp_path, "filelock", "3.0.0"),
        _house(tmp_path, "vllm", "0.24.0", ["torch==2.11.0"]),
    ]
    layers = {layer: [h.name for h in items] for layer, items in group_layers(profile, files).items()}
    assert layers["torch"] == ["cuda-toolkit", "nvidia-cublas", "torch"]
    assert layers["torch-extras"] == ["nvidia-cuda-nvcc", "torchvision"]
    assert layers["engine"] == ["vllm"] and layers["deps"] == ["filelock"]


def test_the_file_manifest_resolves_hard_links_and_matches_the_tree(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "a").write_bytes(b"same")
    (tree / "bin" / "b").hardlink_to(tree / "bin" / "a")
    info = write_layer(tree_items(tree), tmp_path / "t.tar", SPEC.epoch)
    assert {e.path: e.kind for e in info.entries}["bin/b"] == HARDLINK
    manifest = merge([info.entries])
    assert {e.path: e.kind for e in manifest.entries}["bin/b"] == FILE
    out = tmp_path / "unpacked"
    with tarfile.open(tmp_path / "t.tar") as tar:
        tar.extractall(out, filter="tar")
    assert of_tree(out).sha256 == manifest.sha256
    (out / "bin" / "a").chmod(0o600)
    found = differences(manifest, of_tree(out))
    assert [(d.path, d.what) for d in found] == [("bin/a", "mode"), ("bin/b", "mode")]  # one inode


def test_later_layers_win_path_by_path() -> None:
    lower = [Entry("etc", DIR, 0o755), Entry("etc/x", FILE, 0o644, 1, "a" * 64)]
    upper = [Entry("etc/x", FILE, 0o644, 2, "b" * 64)]
    merged = merge([lower, upper])
    assert [(e.path, e.sha256[:1]) for e in merged.entries] == [("etc", ""), ("etc/x", "b")]


def test_a_record_explains_which_layer_group_and_path_differ() -> None:
    site = "opt/venv/lib/python3.11/site-packages"
    before = [Entry(f"{site}/pkg/__init__.py", FILE, 0o644, 1, "a" * 64), Entry(f"{site}/other/x.py", FILE, 0o644)]
    after = [Entry(f"{site}/pkg/__init__.py", FILE, 0o755, 1, "a" * 64), Entry(f"{site}/other/x.py", FILE, 0o644)]
    config = {"Env": ["A=1"], "Labels": {"x": "1"}}

    def record(entries: list[Entry], diff: str, labels: dict[str, str]) -> expected.ImageRecord:
        layer = expected.LayerRecord("deps", diff, 10, expected.groups(entries))
        base = expected.LayerRecord("base", "sha256:" + "0" * 64, 5, {})
        return expected.ImageRecord(
            "p", "l", "i", f"sha256:{diff[-1] * 64}", "f", {**config, "Labels": labels}, [base, layer]
        )

    want = record(before, "sha256:" + "1" * 64, {"x": "1"})
    have = record(after, "sha256:" + "2" * 64, {"x": "2"})
    text = "\n".join(expected.explain(want, have, {want.layers[1].diff_id: before, have.layers[1].diff_id: after}))
    assert "config: Labels.x differs" in text
    assert "layer 1 (deps)" in text and "layer 0" not in text
    assert f"differs  {site}/pkg" in text and f"{site}/other" not in text
    assert f"mode     {site}/pkg/__init__.py" in text
    unknown = "\n".join(expected.explain(want, have, {}))
    assert "not in this machine's store" in unknown


def test_the_source_hash_covers_the_package_not_the_docs(tmp_path: Path) -> None:
    (tmp_path / "verlenv").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "verlenv" / "a.py").write_text("A = 1\n")
    (tmp_path / "README.md").write_text("docs\n")
    first = source_sha256(tmp_path)
    (tmp_path / "README.md").write_text("other docs\n")
    assert source_sha256(tmp_path) == first
    (tmp_path / "verlenv" / "a.py").write_text("A = 2\n")
    assert source_sha256(tmp_path) != first


def test_the_source_hash_covers_the_executable_bit(tmp_path: Path) -> None:
    """The wheel keeps each file's executable bit, so a chmod alone changes the image: the label too."""
    (tmp_path / "verlenv").mkdir()
    script = tmp_path / "verlenv" / "run.py"
    script.write_text("print(1)\n")
    script.chmod(0o644)
    plain = source_sha256(tmp_path)
    script.chmod(0o755)
    executable = source_sha256(tmp_path)
    assert executable != plain
    script.chmod(0o744)  # only the owner's bit counts, as in git and in the wheel
    assert source_sha256(tmp_path) == executable
    script.chmod(0o664)  # group write is not a mode git or the wheel keeps
    assert source_sha256(tmp_path) == plain


def test_file_manifest_round_trips(tmp_path: Path) -> None:
    manifest = FileManifest((Entry("a", DIR, 0o755), Entry("a/b", FILE, 0o644, 3, "c" * 64)))
    manifest.write(tmp_path / "m.gz")
    assert FileManifest.read(tmp_path / "m.gz") == manifest
    assert (tmp_path / "m.gz").read_bytes() == (manifest.write(tmp_path / "n.gz") or (tmp_path / "n.gz").read_bytes())
