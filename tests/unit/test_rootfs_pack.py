"""Packing an image for a host with no engine and applying it there: only what the host lacks travels,
every part and reused file is checked, and the result is the image's tree, owners and modes included."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.helpers.fakewheels import record_digest
from verlenv.image import oci, packcodec, rootfs
from verlenv.image.filemanifest import merge, of_tree
from verlenv.image.tarlayer import tree_items, write_layer

EPOCH = 1790294400
SITE = "opt/venv/lib/python3.11/site-packages"


def _image(tmp_path: Path) -> tuple[list[Path], bytes, str, list]:  # type: ignore[type-arg]
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "usr/bin").mkdir(parents=True)
    (lower / "usr/bin/tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (lower / "usr/bin/tool").chmod(0o4755)  # setuid survives
    (lower / "usr/bin/tool-link").symlink_to("tool")
    (lower / "etc").mkdir()
    (lower / "etc/config").write_text("a=1\n")
    (upper / SITE / "pkg").mkdir(parents=True)
    (upper / SITE / "pkg/big.so").write_bytes(os.urandom(200_000))  # the host will have this one
    (upper / SITE / "pkg/__init__.py").write_text("X = 1\n")
    (upper / "etc").mkdir()
    (upper / "etc/config").write_text("a=2\n")  # a later layer replaces a file
    layers, infos = [], []
    for name, tree in (("lower", lower), ("upper", upper)):
        info = write_layer(tree_items(tree), tmp_path / f"{name}.tar", EPOCH)
        layers.append(oci.Layer(info.diff_id, tmp_path / f"{name}.tar", name))
        infos.append(info.entries)
    config = oci.config_bytes(oci.ImageSpec(env=(("PATH", "/usr/bin"),), labels=()), layers)
    return [layer.path for layer in layers], config, oci.image_id(config), infos


def _host_with(tmp_path: Path, data: bytes) -> dict[str, list[object]]:
    """A 'host' site-packages whose RECORD lists a file with ``data``: what `rootfs inventory` reads."""
    site = tmp_path / "host-site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg/big.so").write_bytes(data)
    digest = record_digest(data)
    (site / "pkg-1.dist-info").mkdir()
    (site / "pkg-1.dist-info/RECORD").write_text(f"pkg/big.so,sha256={digest},{len(data)}\npkg-1.dist-info/RECORD,,\n")
    return rootfs.inventory([site])


MAGIC = {"zstd": b"\x28\xb5\x2f\xfd", "gzip": b"\x1f\x8b", "xz": b"\xfd7zXZ\x00"}


@pytest.mark.parametrize("codec", ["zstd", "gzip", "xz"])
def test_pack_carries_only_what_the_host_lacks_and_apply_makes_the_image_tree(tmp_path: Path, codec: str) -> None:
    layers, config, image_id, entries = _image(tmp_path)
    manifest = merge(entries)
    big = (tmp_path / "upper" / SITE / "pkg/big.so").read_bytes()
    have = _host_with(tmp_path, big)
    bundle = rootfs.pack(manifest, layers, config, image_id, have, tmp_path / "pack", part_bytes=512, codec=codec)
    assert [path for path, _, _ in bundle.reuse] == [f"{SITE}/pkg/big.so"]
    parts = [p for g in bundle.groups for p in g.parts]
    assert sum(p.size for p in parts) < 100_000 and len(parts) > 1  # a group cut into parts at any byte
    first = (tmp_path / "pack" / parts[0].name).read_bytes()
    assert first.startswith(MAGIC[codec]) and f".tar.{packcodec.SUFFIX[codec]}." in parts[0].name
    assert rootfs.Bundle.from_json((tmp_path / "pack" / rootfs.MANIFEST_NAME).read_text()).codec == codec
    target = tmp_path / "tree"
    applied = rootfs.apply(tmp_path / "pack", target, have, workers=2)
    rootfs.verify_tree(target, applied)
    assert of_tree(target).sha256 == manifest.sha256
    assert (target / "etc/config").read_text() == "a=2\n"
    assert (target / "usr/bin/tool").stat().st_mode & 0o7777 == 0o4755
    assert str((target / "usr/bin/tool-link").readlink()) == "tool"


def test_a_damaged_part_is_refused_before_anything_is_unpacked(tmp_path: Path) -> None:
    layers, config, image_id, entries = _image(tmp_path)
    bundle = rootfs.pack(merge(entries), layers, config, image_id, {}, tmp_path / "pack", part_bytes=4096)
    part = tmp_path / "pack" / bundle.groups[0].parts[0].name
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(rootfs.RootfsError, match=f"part {part.name} does not have sha256"):
        rootfs.apply(tmp_path / "pack", tmp_path / "tree", {})
    assert not (tmp_path / "tree").exists()


def test_a_host_file_that_lies_about_its_hash_is_refused(tmp_path: Path) -> None:
    layers, config, image_id, entries = _image(tmp_path)
    big = (tmp_path / "upper" / SITE / "pkg/big.so").read_bytes()
    have = _host_with(tmp_path, big)
    rootfs.pack(merge(entries), layers, config, image_id, have, tmp_path / "pack", part_bytes=1 << 20)
    (tmp_path / "host-site/pkg/big.so").write_bytes(b"x" * len(big))  # changed since its RECORD was written
    with pytest.raises(rootfs.RootfsError, match="its RECORD is wrong"):
        rootfs.apply(tmp_path / "pack", tmp_path / "tree", have)


def test_verify_names_the_first_paths_that_differ(tmp_path: Path) -> None:
    layers, _, _, entries = _image(tmp_path)
    manifest = merge(entries)
    target = tmp_path / "tree"
    rootfs.materialize(layers, target)
    rootfs.verify_tree(target, manifest)
    (target / "etc/config").write_text("a=3\n")
    (target / "etc/extra").write_text("")
    with pytest.raises(rootfs.RootfsError) as info:
        rootfs.verify_tree(target, manifest)
    assert "content  etc/config" in str(info.value) and "extra    etc/extra" in str(info.value)


def test_the_inventory_command_runs_with_the_standard_library_only(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "inv.json.gz"
    code = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); from verlenv.image import rootfs; "
         "sys.exit(rootfs.main(['inventory', sys.argv[2]]))", str(Path(rootfs.__file__).parents[2]), str(out)],
        check=False,
    ).returncode  # fmt: skip
    assert code == 0
    with gzip.open(out, "rt") as handle:
        found = json.load(handle)
    assert all(len(sha) == 64 and isinstance(entry[1], int) for sha, entry in found.items())


def test_a_second_pack_reuses_the_compressed_groups_of_unchanged_layers(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    layers, config, image_id, entries = _image(tmp_path)
    manifest = merge(entries)
    keep = tmp_path / "keep"
    first = rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "a", part_bytes=4096, keep=keep)
    written: list[str] = []
    original = rootfs._write_group
    monkeypatch.setattr(rootfs, "_write_group", lambda *a, **k: written.append(a[0]) or original(*a, **k))
    second = rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "b", part_bytes=4096, keep=keep)
    assert written == [] and second.groups == first.groups
    target = tmp_path / "tree"
    rootfs.verify_tree(target, rootfs.apply(tmp_path / "b", target, {}, workers=2))


def test_a_pack_that_fails_while_compressing_leaves_no_group_to_trust(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    layers, config, image_id, entries = _image(tmp_path)
    manifest = merge(entries)
    keep = tmp_path / "keep"
    original = rootfs._write_group

    def dies_half_way(name, members, sources, out, part_bytes, how):  # type: ignore[no-untyped-def]
        original(name, members, sources, out, part_bytes, how)
        raise OSError("disk full")

    monkeypatch.setattr(rootfs, "_write_group", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "a", part_bytes=4096, keep=keep)
    assert list(keep.iterdir()) == []  # its parts were written, but never put where a later pack looks
    monkeypatch.setattr(rootfs, "_write_group", original)
    rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "b", part_bytes=4096, keep=keep)
    assert all((group / "group.json").is_file() for group in keep.iterdir())
    target = tmp_path / "tree"
    rootfs.verify_tree(target, rootfs.apply(tmp_path / "b", target, {}, workers=2))


def test_the_inventory_leaves_out_a_file_edited_after_install_and_adds_trees_made_before(tmp_path: Path) -> None:
    """An H200 host's certifi cacert.pem no longer matched its RECORD; the pack trusted RECORD and the
    apply failed. Content decides now. A tree made there before (an extension's build environment)
    counts too, small files included."""
    site = tmp_path / "site"
    (site / "pkg-1.0.dist-info").mkdir(parents=True)
    kept, edited = os.urandom(100_000), os.urandom(100_000)
    lines = []
    for name, data in (("kept.bin", kept), ("edited.bin", edited)):
        (site / name).write_bytes(data)
        digest = record_digest(data)
        lines.append(f"{name},sha256={digest},{len(data)}")
    (site / "pkg-1.0.dist-info/RECORD").write_text("\n".join(lines) + "\n")
    (site / "edited.bin").write_bytes(edited[:-1] + bytes([edited[-1] ^ 1]))  # b"x" was a no-op 1 time in 256
    found = rootfs.inventory([site])
    assert hashlib.sha256(kept).hexdigest() in found and hashlib.sha256(edited).hexdigest() not in found
    layers, _, _, entries = _image(tmp_path)
    tree = tmp_path / "made-before"
    rootfs.materialize(layers, tree)
    made = rootfs.tree_inventory(tree, merge(entries))
    small = hashlib.sha256(b"X = 1\n").hexdigest()
    assert made[small] == [str(tree / SITE / "pkg/__init__.py"), 6]


def test_the_tree_run_takes_its_report_from_the_file_whatever_stdout_holds(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """vLLM logs to stdout: the first vLLM runs in a CUDA image's tree passed (exit 0) and the runner,
    which parsed stdout, said they produced no report."""
    import subprocess

    from verlenv.accept import rootfs_run
    from verlenv.image.filemanifest import FileManifest

    tree = tmp_path / "tree"
    tree.mkdir()
    image = rootfs_run.ImageFacts("sha256:" + "ab" * 32, (), FileManifest(()))

    def suite(plan, command, timeout_s):  # type: ignore[no-untyped-def]
        assert command[command.index("--report") + 1] == "/root/acceptance.json"
        (plan.scratch / "home" / "acceptance.json").write_text(json.dumps({"passed": True, "verdicts": []}))
        noise = "INFO 12-04 15:20:19 [gpu_worker.py:412] reserved 2.0 GiB for the KV cache\n{not json"
        return subprocess.CompletedProcess(command, 0, stdout=noise, stderr="")

    monkeypatch.setattr(rootfs_run, "run_in_tree", suite)
    monkeypatch.setattr(rootfs_run, "pick_runner", lambda wanted: "chroot")
    (tmp_path / "scratch" / "home").mkdir(parents=True)
    (tmp_path / "scratch" / "home" / "acceptance.json").write_text('{"passed": false}')  # an older run's
    report = rootfs_run.accept_in_tree(tree, image, tmp_path / "scratch")
    assert report["passed"] is True and report["image_id"] == image.image_id

    def silent(plan, command, timeout_s):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(command, 3, stdout="", stderr="Traceback ...\nAssertionError: boom")

    monkeypatch.setattr(rootfs_run, "run_in_tree", silent)
    with pytest.raises(rootfs.RootfsError, match="produced no report \\(exit 3\\)"):
        rootfs_run.accept_in_tree(tree, image, tmp_path / "scratch")  # the older run's file was removed


def _no_zstd_program(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """PATH with the programs a pack and apply use, but not zstd."""
    import shutil

    bin_dir = tmp_path / "bin-without-zstd"
    bin_dir.mkdir()
    for tool in ("xz", "sh"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_zstd_parts_apply_with_the_zstandard_module_where_the_host_has_no_zstd_program(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch
) -> None:
    pytest.importorskip("zstandard", reason="the test extra installs it")
    layers, config, image_id, entries = _image(tmp_path)
    manifest = merge(entries)
    rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "pack", part_bytes=512)  # by the program
    _no_zstd_program(monkeypatch, tmp_path)
    target = tmp_path / "tree"
    rootfs.verify_tree(target, rootfs.apply(tmp_path / "pack", target, {}, workers=2))
    again = rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "pack2", part_bytes=512)  # by the module
    rootfs.verify_tree(tmp_path / "tree2", rootfs.apply(tmp_path / "pack2", tmp_path / "tree2", {}, workers=2))
    assert again.codec == "zstd"


def test_zstd_parts_on_a_host_that_cannot_read_them_fail_before_anything_is_made(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch
) -> None:
    layers, config, image_id, entries = _image(tmp_path)
    rootfs.pack(merge(entries), layers, config, image_id, {}, tmp_path / "pack", part_bytes=4096)
    _no_zstd_program(monkeypatch, tmp_path)
    monkeypatch.setattr(packcodec, "_zstandard", lambda: None)
    with pytest.raises(rootfs.RootfsError, match="neither the zstd program nor Python's zstandard module") as info:
        rootfs.apply(tmp_path / "pack", tmp_path / "tree", {})
    assert "--codec gzip" in str(info.value) and "apt-get install zstd" in str(info.value)
    assert not (tmp_path / "tree").exists()


def test_a_version_1_pack_is_read_as_xz_and_a_bad_level_is_refused(tmp_path: Path) -> None:
    layers, config, image_id, entries = _image(tmp_path)
    manifest = merge(entries)
    rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "pack", part_bytes=4096, codec="xz")
    meta = tmp_path / "pack" / rootfs.MANIFEST_NAME
    data = json.loads(meta.read_text())
    del data["codec"]
    meta.write_text(json.dumps({**data, "version": 1}))  # what packs made before codecs were named look like
    target = tmp_path / "tree"
    rootfs.verify_tree(target, rootfs.apply(tmp_path / "pack", target, {}, workers=2))
    with pytest.raises(rootfs.RootfsError, match="zstd level 22 is out of range: 1-19"):
        rootfs.pack(manifest, layers, config, image_id, {}, tmp_path / "bad", part_bytes=4096, level=22)
    assert not (tmp_path / "bad").exists()
