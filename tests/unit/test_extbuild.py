"""The extension builder's own logic: its key, jobs, progress and what a failure says."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.helpers.fakewheels import record_digest
from verlenv.image.extbuild import BuildEnv, _differences, _failure, _first_error, jobs, key_of, wheel_files
from verlenv.profiles.profile import ExtensionBuild
from verlenv.wheels.builtrecord import BuiltWheel
from verlenv.wheels.wheelhouse import HouseFile

BUILD = ExtensionBuild("flash-attn", "2.8.3", ("80", "90"), ("torch",), (("FLASH_ATTENTION_FORCE_BUILD", "TRUE"),), "x")
SDIST = HouseFile("flash-attn", "2.8.3", "flash_attn-2.8.3.tar.gz", "a" * 64, Path("x"))
ENV = BuildEnv("sha256:" + "0" * 64, {}, {"torch": "2.11.0 sha256:" + "1" * 64, "deb:gcc-12": "12.2.0-14"})


def test_the_key_covers_every_input_but_not_the_engine_image_id() -> None:
    key = key_of(BUILD, SDIST, ENV)
    assert key == key_of(BUILD, SDIST, BuildEnv("sha256:" + "9" * 64, {"X": "1"}, ENV.inputs))
    other_torch = BuildEnv(ENV.image_id, {}, {**ENV.inputs, "torch": "2.11.0 sha256:" + "2" * 64})
    assert key != key_of(BUILD, SDIST, other_torch)
    assert key != key_of(
        ExtensionBuild(*BUILD.__dict__.values()).__class__("flash-attn", "2.8.3", ("90",), ("torch",), BUILD.env, "x"),
        SDIST,
        ENV,
    )
    assert key != key_of(BUILD, HouseFile("flash-attn", "2.8.3", "f", "b" * 64, Path("x")), ENV)


def test_jobs_is_at_least_one_and_at_most_the_cores() -> None:
    import os

    assert 1 <= jobs() <= (os.cpu_count() or 1)


NINJA_LOG = [
    "[1/73] c++ ... flash_api.cpp",
    "FAILED: [code=1] /build/src/fa/build/temp/csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.o",
    "/opt/venv/bin/nvcc -MD -c -c /build/src/fa/csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu -o x.o",
    "In file included from /opt/venv/include/cccl/cuda/std/__cccl/builtin.h:26,",
    '/opt/venv/include/cccl/cuda/std/__cccl/cuda_toolkit.h:41:8: error: #error "CUDA compiler and headers differ"',
    "ninja: build stopped: subcommand failed.",
]


def test_a_ninja_failure_names_the_source_and_the_first_error(tmp_path: Path) -> None:
    message = _failure(BUILD, NINJA_LOG, tmp_path / "build.log")
    assert "failed at /build/src/fa/csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu" in message
    assert "cuda_toolkit.h:41:8: error" in message and f"full log: {tmp_path / 'build.log'}" in message


def test_a_killed_build_container_says_so_and_that_it_resumes(tmp_path: Path) -> None:
    """Killed mid-compile (the OOM killer, `docker kill`), the log ends in nvcc's warnings: those are not the cause."""
    warnings = ["  [3/73] nvcc -c a.cu", "  vector_types.h:561:104: note: declared here", "  561 | typedef double4;"]
    message = _failure(BUILD, warnings, tmp_path / "build.log", 137)
    assert "its container was killed (SIGKILL: out of memory, or `docker kill`)" in message
    assert "resumes from them" in message and "double4" not in message
    assert "failed:" in _failure(BUILD, warnings, tmp_path / "build.log", 1)  # a plain failure shows the tail


def test_compiler_errors_without_ninja_are_found_too() -> None:
    assert _first_error(["  csrc/twice.cpp:3:59: error: expected ';'"]) == (
        "csrc/twice.cpp",
        "csrc/twice.cpp:3:59: error: expected ';'",
    )
    assert _first_error(['k.cu(12): error: identifier "x" is undefined'])[0] == "k.cu"  # type: ignore[index]
    assert _first_error(["all fine"]) is None


def _wheel(where: Path, files: dict[str, bytes]) -> Path:
    path = where / "x-1-cp311-cp311-linux_x86_64.whl"
    record = ""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
            digest = record_digest(data)
            record += f"{name},sha256={digest},{len(data)}\n"
        archive.writestr("x-1.dist-info/RECORD", record + "x-1.dist-info/RECORD,,\n")
    return path


def test_a_different_rebuild_names_the_files_that_differ(tmp_path: Path) -> None:
    import hashlib

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = wheel_files(_wheel(tmp_path / "a", {"x/_C.so": b"one", "x/__init__.py": b""}))
    second = wheel_files(_wheel(tmp_path / "b", {"x/_C.so": b"two", "x/__init__.py": b""}))
    assert first["x/_C.so"] == hashlib.sha256(b"one").hexdigest()

    def built(files: dict[str, str], sha: str) -> BuiltWheel:
        return BuiltWheel("x", "1", "s", "k", "x.whl", sha, [], [], {}, files)

    text = _differences(built(first, "1" * 64), built(second, "2" * 64))
    assert "x/_C.so" in text and "x/__init__.py" not in text


def test_an_ext_wheel_must_be_a_declared_build_for_the_profiles_python(repo_paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from verlenv.errors import ConfigError
    from verlenv.image.build import _declared_build_of
    from verlenv.profiles.profile import load_profile

    profile = load_profile(repo_paths, "verl0.9.1-vllm0.24.0-torch2.11.0-cu130")  # flash-attn 2.8.3, Python 3.11

    def wheel(name: str) -> Path:
        path = tmp_path / name
        path.write_bytes(b"PK")
        return path

    assert (
        _declared_build_of(profile, wheel("flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl")).pin == "flash-attn==2.8.3"
    )
    refused = {
        "flash_attn-2.8.2-cp311-cp311-linux_x86_64.whl": "not an extension",  # another version
        "xformers-0.0.33-cp311-cp311-linux_x86_64.whl": "(declared: flash-attn==2.8.3)",
        "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl": "not a wheel for cp311",
        "flash_attn-2.8.3.tar.gz": "not a wheel's file name",
    }
    for name, says in refused.items():
        with pytest.raises(ConfigError) as info:
            _declared_build_of(profile, wheel(name))
        assert name in info.value.message and says in info.value.message, info.value.message
    with pytest.raises(ConfigError, match="no such file"):
        _declared_build_of(profile, tmp_path / "gone-1.0-py3-none-any.whl")


def test_verify_checks_a_recorded_wheel_only_when_it_is_the_declared_build(repo_paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A record for sm_90 is not the wheel of a profile that now declares sm_80, sm_90 and sm_100."""
    from dataclasses import replace

    from verlenv.paths import ProjectPaths
    from verlenv.profiles.profile import load_profile
    from verlenv.verify.report import _with_built
    from verlenv.wheels import builtrecord
    from verlenv.wheels.cache import Cache, sha256_of
    from verlenv.wheels.wheelhouse import HouseFile, Wheelhouse

    declared = load_profile(repo_paths, "verl0.9.1-vllm0.24.0-torch2.11.0-cu130")
    real = declared.build_of("flash-attn")
    assert real is not None
    # the profile as it was when it declared sm_90 alone (it now declares sm_80, sm_90 and sm_100)
    sm90_env = tuple((k, "90") if k == "FLASH_ATTN_CUDA_ARCHS" else (k, v) for k, v in real.env)
    build = replace(real, cuda_archs=("90",), env=sm90_env)
    profile = replace(declared, builds=(build,))
    cache, sdist, wheel = Cache(tmp_path / "cache"), tmp_path / "flash_attn-2.8.3.tar.gz", tmp_path / "w.whl"
    sdist.write_bytes(b"the sdist")
    wheel.write_bytes(b"the sm_90 wheel")
    wheel_sha = sha256_of(wheel)
    cache.store(wheel, wheel_sha, "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl")
    paths = ProjectPaths(tmp_path)
    paths.lockfiles.mkdir()
    env = [f"{k}={v}" for k, v in build.env]
    record = BuiltWheel("flash-attn", "2.8.3", sha256_of(sdist), "k", "flash_attn.whl", wheel_sha, ["90"], env, {})
    builtrecord.write(builtrecord.builds_path(paths, profile.name), {"flash-attn": record})
    house = Wheelhouse((HouseFile("flash-attn", "2.8.3", sdist.name, sha256_of(sdist), sdist),), 0, 0)

    assert _with_built(paths, profile, house, cache).files[0].sha256 == wheel_sha
    three = replace(build, cuda_archs=("80", "90", "100"))
    other_archs = replace(profile, builds=(three,))
    assert _with_built(paths, other_archs, house, cache).files[0].path == sdist  # left unbuilt, not the sm_90 wheel
    flags = replace(build, env=(*build.env, ("NVCC_THREADS", "4")))
    assert _with_built(paths, replace(profile, builds=(flags,)), house, cache).files[0].path == sdist
    moved = Wheelhouse((replace(house.files[0], sha256="0" * 64),), 0, 0)  # another sdist
    assert _with_built(paths, profile, moved, cache).files[0].sha256 == "0" * 64
