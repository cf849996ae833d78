"""The cpu-smoke image's own tree, on this host with no container: unpacked from the layer store,
proven file by file, run read-only under bubblewrap and chroot (as root) with driver libraries bound
in, accepted there, and published on the strength of that report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verlenv.accept.rootfs_run import DRIVER_MOUNT, ImageFacts, RunPlan, accept_in_tree, plan, run_in_tree
from verlenv.cli import main
from verlenv.image import rootfs
from verlenv.image.stored import stored_image
from verlenv.paths import ProjectPaths
from verlenv.release.publish import publish
from verlenv.wheels.cache import Cache


@pytest.fixture(scope="module")
def tree(cpu_smoke, cache: Cache, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(tree, pack folder): the image unpacked, and what a `rootfs pack` would carry beside it."""
    image = stored_image(cache, cpu_smoke.image_id)
    where = tmp_path_factory.mktemp("rootfs")
    target, pack = where / "tree", where / "pack"
    rootfs.materialize(image.layer_paths, target)
    manifest = image.manifest()
    pack.mkdir()
    bundle = rootfs.Bundle(image.image_id, manifest.sha256, image.config.decode(), (), ())
    (pack / rootfs.MANIFEST_NAME).write_text(bundle.to_json())
    manifest.write(pack / "files.gz")
    yield target, pack
    shutil.rmtree(where, ignore_errors=True)  # 2.4 GiB held to the session's end otherwise


def test_the_unpacked_tree_is_the_image_file_by_file(tree, cpu_smoke, capsys) -> None:  # type: ignore[no-untyped-def]
    target, _ = tree
    assert main(["rootfs", "verify", str(target), "--image", cpu_smoke.image_id, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["identical"] and result["files_sha256"] == cpu_smoke.files_sha256


def test_chroot_runs_the_tree_read_only_with_the_driver_folder_bound_in(tree, cpu_smoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, pack = tree
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "libcuda.so.1").write_text("a stand-in: only its presence is checked\n")
    base = plan(target, ImageFacts.from_bundle(pack), tmp_path / "scratch", "chroot", {})
    run = RunPlan(target, base.scratch, "chroot", {**base.env, "LD_LIBRARY_PATH": DRIVER_MOUNT}, drivers)
    command = [
        "sh",
        "-c",
        f"echo id=$VERLENV_IMAGE_ID; ls {DRIVER_MOUNT}; python -c 'import torch; print(torch.__version__)'; "
        "touch /opt/venv/x 2>&1 || echo read-only; touch $HOME/y && echo home-writable",
    ]
    proc = run_in_tree(run, command, timeout_s=300)
    assert proc.returncode == 0, proc.stderr
    assert f"id={cpu_smoke.image_id}" in proc.stdout and "libcuda.so.1" in proc.stdout
    assert "2.13.0+cpu" in proc.stdout and "read-only" in proc.stdout and "home-writable" in proc.stdout
    rootfs.verify_tree(target, ImageFacts.from_bundle(pack).manifest)  # the run changed nothing


def test_accepted_in_its_own_tree_under_bubblewrap_then_published(  # type: ignore[no-untyped-def]
    tree, cpu_smoke, project_copy: ProjectPaths, cache: Cache, registry, tmp_path: Path
) -> None:
    target, pack = tree
    report = accept_in_tree(
        target, ImageFacts.from_bundle(pack), tmp_path / "scratch", runner="bwrap",
        suite_args=("--steps", "15", "--no-distributed"),
    )  # fmt: skip
    assert report["passed"], report["verdicts"]
    assert report["image_id"] == cpu_smoke.image_id and report["files_manifest_sha256"] == cpu_smoke.files_sha256
    assert report["ran_in"]["runner"] == "bwrap"
    carried = tmp_path / "report.json"
    carried.write_text(json.dumps(report))
    done = publish(
        project_copy, "cpu-smoke", cache, f"{registry.host}/verlenv", tmp_path / "catalog.json", report_file=carried
    )
    assert done.entry.acceptance["runner"] == "bwrap" and done.entry.image_id == cpu_smoke.image_id


def test_a_changed_tree_is_refused_naming_the_path(tree, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, pack = tree
    victim = target / "opt/verlenv/manifest.json"
    original = victim.read_bytes()
    victim.write_bytes(original.replace(b'"profile"', b'"profil3"'))
    try:
        code = main(["accept-image", "--rootfs", str(target), "--bundle", str(pack), "--scratch", str(tmp_path)])
    finally:
        victim.write_bytes(original)
    assert code == 6
    err = capsys.readouterr().err
    assert "is not the image's tree" in err and "content  opt/verlenv/manifest.json" in err


def test_run_binds_a_writable_folder_and_sets_variables(tree, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """How an extension is built in the tree on a host with more cores: its build folder bound in."""
    target, pack = tree
    work = tmp_path / "work"
    work.mkdir()
    common = ["rootfs", "run", str(target), "--bundle", str(pack), "--scratch", str(tmp_path / "s"), "--no-verify"]
    command = ["--", "sh", "-c", "echo $GREETING > /mnt/said && touch /opt/x 2>/dev/null || echo still-read-only"]
    assert main([*common, "--runner", "bwrap", "--bind", f"{work}:/mnt", "--env", "GREETING=hello", *command]) == 0
    assert (work / "said").read_text() == "hello\n" and "still-read-only" in capsys.readouterr().out
    assert main([*common, "--bind", "no-colon-here", *command]) == 2
    assert "--bind 'no-colon-here': expected HOST:DEST" in capsys.readouterr().err


def test_the_pack_command_packs_with_the_codec_and_level_asked_for_and_the_target_applies_it(  # type: ignore[no-untyped-def]
    cpu_smoke, tmp_path: Path, capsys
) -> None:
    """`--xz-level 1` was parsed and never passed on: three packs of the default image ran at xz's
    preset 6, 20-27 min each. The codec and level now reach the parts, and a run says what it used."""
    import subprocess
    import sys

    inventory = tmp_path / "have.json.gz"
    assert rootfs.main(["inventory", str(inventory)]) == 0  # this venv's torch is the image's: reused
    pack = tmp_path / "pack"
    argv = ["rootfs", "pack", "--image", cpu_smoke.image_id, "--have", str(inventory), "--out", str(pack)]
    assert main([*argv, "--codec", "gzip", "--level", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["codec"] == "gzip" and result["reused_files"] > 0 and result["seconds"] > 0
    first = sorted(pack.glob("g*.tar.gz.*"))[0].read_bytes()
    assert first[:2] == b"\x1f\x8b" and first[8] == 4  # gzip's XFL byte: 4 = the fastest level, 1
    target = tmp_path / "tree"
    stdlib_only = "import sys; sys.path.insert(0, sys.argv[1]); from verlenv.image import rootfs; "
    stdlib_only += "sys.exit(rootfs.main(sys.argv[2:]))"  # -S: no site-packages, as on a bare GPU node
    root = str(Path(rootfs.__file__).parents[2])
    apply = [sys.executable, "-I", "-S", "-c", stdlib_only, root, "apply", str(pack), str(target), str(inventory)]
    proc = subprocess.run(apply, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"manifest {cpu_smoke.files_sha256}" in proc.stdout
