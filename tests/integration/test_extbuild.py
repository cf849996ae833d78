"""Extensions built from locked sdists, through the real path: lock (sdist hash from an index), verify,
the image build (compiled in a container of the image's own lower layers, no network), the record in
lockfiles/NAME.builds.json, verify of the built wheel's ELF, and a rebuild from scratch that must give
the same wheel. flash-attn itself takes hours: a small C++ torch extension made here stands in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import localindex
from tests.helpers.probeext import make_sdist
from tests.helpers.variants import copy_project
from verlenv.cli import main
from verlenv.errors import CheckFailed
from verlenv.image.build import BuildOptions, build_image, record_path
from verlenv.image.extbuild import BuildEnv, built_wheel
from verlenv.paths import ROOT_ENV, ProjectPaths
from verlenv.profiles.profile import ExtensionBuild
from verlenv.wheels import builtrecord
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.wheelhouse import HouseFile

BUILD_ENTRY = """
[[builds]]
name = "verlenv-probe-ext"
version = "0.1"
cuda_archs = []
requires = ["torch"]
why = "a small real C++ torch extension: the extension-build path in CI"
"""
PROBE = "python -c 'import torch, verlenv_probe_ext; print(\"TWICE\", verlenv_probe_ext.twice(torch.ones(3)).tolist())'"


@pytest.fixture
def variant(project_copy: ProjectPaths, cpu_smoke_files: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    # verify below fetches from the local index alone, which holds only the sdist: the locked wheels
    # must be in the cache already (run on its own, this test failed on absl-py, 2026-12-06)
    paths = copy_project(project_copy, tmp_path / "variant")
    with paths.profile("cpu-smoke").open("a") as handle:
        handle.write(BUILD_ENTRY)
    sdist = make_sdist(tmp_path / "index")
    monkeypatch.setenv(ROOT_ENV, str(paths.root))
    with localindex.serve(tmp_path / "index") as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        assert main(["lock", "--profile", "cpu-smoke"]) == 0
        assert main(["verify", "--profile", "cpu-smoke", "-q"]) == 0
    return paths, sha256_of(sdist)


@pytest.fixture
def private(cache: Cache, tmp_path: Path) -> Cache:
    """A cache of its own (files and layers hard-linked from the shared one), so forgetting its builds
    never touches another build's folder."""
    import os

    own = Cache(tmp_path / "cache")
    for folder in ("files", "layers"):
        if (cache.root / folder).is_dir():
            shutil.copytree(cache.root / folder, own.root / folder, copy_function=os.link)
    return own


def _forget_builds(cache: Cache) -> None:
    for folder in ("built-ext", "extbuild"):
        shutil.rmtree(cache.root / folder, ignore_errors=True)


def test_an_sdist_extension_is_locked_built_recorded_verified_and_rebuilt_the_same(  # type: ignore[no-untyped-def]
    engine, variant, private: Cache, capsys
) -> None:
    cache = private
    paths, sdist_sha = variant
    lock_text = paths.lock("cpu-smoke").read_text()
    assert f"verlenv-probe-ext==0.1 \\\n    --hash=sha256:{sdist_sha}" in lock_text
    _forget_builds(cache)
    first = build_image(paths, "cpu-smoke", cache, BuildOptions(quiet=True))
    record = builtrecord.read(builtrecord.builds_path(paths, "cpu-smoke"))["verlenv-probe-ext"]
    assert record.sdist_sha256 == sdist_sha and record.wheel.endswith(".whl") and record.inputs["torch"]
    assert any(path.endswith(".so") for path in record.files)
    from tests.integration.conftest import run_in

    code, out = run_in(engine, first.image_id, PROBE, stderr=False)
    assert code == 0 and "TWICE [2.0, 2.0, 2.0]" in out, out
    manifest = json.loads(run_in(engine, first.image_id, "cat /opt/verlenv/manifest.json", stderr=False)[1])
    assert manifest["built_from_sdist"]["verlenv-probe-ext"] == record.wheel_sha256

    # verify now checks the built wheel's extension against torch, like any other wheel
    capsys.readouterr()
    assert main(["verify", "--profile", "cpu-smoke", "--json", "--cache", str(cache.root)]) == 0
    report = json.loads(capsys.readouterr().out)["report"]
    assert report["built_from_sdist"] == {"verlenv-probe-ext": record.wheel_sha256}
    probe = [e for e in report["extensions"] if e["owner"].startswith("verlenv-probe-ext ")]
    assert probe and all(e["ok"] for e in probe) and probe[0]["torch_symbols"] > 0, probe

    # from scratch again (no wheel, no objects): the same wheel, so the same image
    _forget_builds(cache)
    second = build_image(paths, "cpu-smoke", cache, BuildOptions(quiet=True))
    again = builtrecord.read(builtrecord.builds_path(paths, "cpu-smoke"))["verlenv-probe-ext"]
    assert again.wheel_sha256 == record.wheel_sha256
    assert second.image_id == first.image_id and second.record == "matched"
    assert json.loads(record_path(paths, "cpu-smoke").read_text())["image_id"] == first.image_id

    # with the wheel cached, the build environment is neither made nor loaded (a cold default build
    # spent 94 s loading ~8 GiB of it for a wheel it then found in the cache). Only this profile's
    # build environments go: another profile's may be in use by a build running beside the tests.
    own_envs = {"label": "io.verlenv.build-env=cpu-smoke"}
    for image in engine.images.list(filters=own_envs):
        engine.images.remove(image.id, force=True)
    third = build_image(paths, "cpu-smoke", cache, BuildOptions(quiet=True))
    assert third.image_id == first.image_id
    assert engine.images.list(filters=own_envs) == []


def _env_of(engine, image_id: str) -> BuildEnv:  # type: ignore[no-untyped-def]
    env = dict(item.split("=", 1) for item in engine.images.get(image_id).attrs["Config"]["Env"])
    return BuildEnv(image_id, env, {"torch": "the cpu-smoke image's"})


def test_a_failed_build_names_the_file_and_the_compiler_error(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, cache: Cache, tmp_path: Path
) -> None:
    sdist = make_sdist(tmp_path, broken=True)
    house = HouseFile("verlenv-probe-ext", "0.1", sdist.name, sha256_of(sdist), sdist)
    build = ExtensionBuild("verlenv-probe-ext", "0.1", (), ("torch",), (), "broken on purpose")
    with pytest.raises(CheckFailed) as info:
        built_wheel(engine, build, house, _env_of(engine, cpu_smoke.image_id), cache, tmp_path / "b.json", True)
    message = info.value.message
    assert "building verlenv-probe-ext==0.1 failed at" in message and "csrc/twice.cpp" in message
    assert "error" in message and "full log:" in message
    assert not (tmp_path / "b.json").exists()  # nothing recorded


def test_a_build_resumes_from_its_object_files(engine, cpu_smoke, cache: Cache, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sdist = make_sdist(tmp_path)
    house = HouseFile("verlenv-probe-ext", "0.1", sdist.name, sha256_of(sdist), sdist)
    build = ExtensionBuild("verlenv-probe-ext", "0.1", (), ("torch",), (), "resume")
    env = _env_of(engine, cpu_smoke.image_id)
    first = built_wheel(engine, build, house, env, cache, tmp_path / "b.json", True)
    # the wheel is gone (as when a build was killed before it packed one); the objects stay
    from verlenv.image.extbuild import key_of

    key = key_of(build, house, env)
    shutil.rmtree(cache.root / "built-ext" / key)
    log = cache.root / "extbuild" / key / "build.log"
    log.unlink()
    second = built_wheel(engine, build, house, env, cache, tmp_path / "b.json", True)
    text = log.read_text()
    assert second.sha256 == first.sha256
    # the objects were normalized, then linked and packed again from them (a C++ object has no nvcc PID)
    assert "[objnorm] 0 of " in text and " -shared " in text.split("[objnorm]", 1)[1], text[-2000:]
    assert "bind.cpp" not in text.split("running build_ext", 1)[-1] or "no work to do" in text.lower(), text[-2000:]


def _rewritten(wheel: Path, out: Path, path: str, text: bytes) -> Path:
    """A copy of ``wheel`` whose file ``path`` holds ``text``, its RECORD line updated: what a build
    that compiled differently would have packed."""
    import zipfile

    from tests.helpers.fakewheels import record_digest

    digest = record_digest(text)
    out.mkdir(parents=True, exist_ok=True)
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as copy:
        for info in source.infolist():
            data = text if info.filename == path else source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = [
                    f"{path},sha256={digest},{len(text)}" if line.startswith(f"{path},") else line
                    for line in data.decode().splitlines()
                ]
                data = ("\n".join(lines) + "\n").encode()
            copy.writestr(info, data)
    return target


def test_a_wheel_built_elsewhere_is_checked_against_the_record_then_used_without_compiling(  # type: ignore[no-untyped-def]
    engine, variant, private: Cache, tmp_path: Path, capsys
) -> None:
    cache = private
    paths, _ = variant
    _forget_builds(cache)
    first = build_image(paths, "cpu-smoke", cache, BuildOptions(quiet=True))
    record_file = builtrecord.builds_path(paths, "cpu-smoke")
    record = builtrecord.read(record_file)["verlenv-probe-ext"]
    carried = tmp_path / "carried" / record.wheel  # as a wheel comes back from a GPU host
    carried.parent.mkdir()
    shutil.copyfile(cache.root / "built-ext" / record.key / record.wheel, carried)
    own_envs = {"label": "io.verlenv.build-env=cpu-smoke"}
    build = ["build", "--profile", "cpu-smoke", "--cache", str(cache.root), "--no-record"]

    def forget() -> None:
        _forget_builds(cache)
        for image in engine.images.list(filters=own_envs):
            engine.images.remove(image.id, force=True)

    # one file inside differs from the record: refused with that file named, nothing kept or recorded
    forget()
    other = _rewritten(carried, tmp_path / "other", "verlenv_probe_ext/__init__.py", b"# built some other way\n")
    capsys.readouterr()
    assert main([*build, "-q", "--ext-wheel", str(other)]) == 6
    err = capsys.readouterr().err
    assert str(other) in err and "verlenv_probe_ext/__init__.py" in err and record.wheel_sha256[:16] in err, err
    assert not any((cache.root / "built-ext").glob("*/*.whl"))
    assert builtrecord.read(record_file)["verlenv-probe-ext"] == record

    # not a wheel of anything the profile builds: a usage error naming the file and what is declared
    stray = tmp_path / "stray" / "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"
    stray.parent.mkdir()
    shutil.copyfile(carried, stray)
    assert main([*build, "-q", "--ext-wheel", str(stray)]) == 2
    err = capsys.readouterr().err
    assert str(stray) in err and "verlenv-probe-ext==0.1" in err, err

    # the wheel as built: it matches the record, and the build uses it with no build environment
    assert main([*build, "--json", "--ext-wheel", str(carried)]) == 0
    out, err = capsys.readouterr()
    assert "matches the record" in err, err
    assert json.loads(out)["build"]["image_id"] == first.image_id
    assert engine.images.list(filters=own_envs) == []
    assert builtrecord.read(record_file)["verlenv-probe-ext"] == record
    assert carried.is_file()  # adopting copies: the given file stays

    # no record of these inputs yet: the wheel is recorded as built, its files listed
    record_file.unlink()
    forget()
    assert main([*build, "-q", "--ext-wheel", str(carried)]) == 0
    again = builtrecord.read(record_file)["verlenv-probe-ext"]
    assert again.wheel_sha256 == record.wheel_sha256 and again.files == record.files and again.key == record.key
