"""The image config's environment: what a CUDA profile's processes need before any RPATH applies."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fakewheels import build_wheel
from verlenv.image.build import _env
from verlenv.profiles.profile import load_profile
from verlenv.wheels.wheelhouse import HouseFile

SGLANG = "verl0.9.1-sglang0.5.12-torch2.11.0-cu130"
SITE = "/opt/venv/lib/python3.11/site-packages"


def _wheel(folder: Path, name: str, version: str, members: list[str]) -> HouseFile:
    path = build_wheel(folder, name, version, dict.fromkeys(members, b"\x7fELF"))
    return HouseFile(name, version, path.name, "0" * 64, path)


def _runtime(folder: Path, lib: str) -> HouseFile:
    return _wheel(folder, "nvidia-cuda-runtime", "13.0.96", [f"{lib}/libcudart.so.13", f"{lib}/../include/x.h"])


def test_a_preloaded_hook_gets_the_cuda_runtime_folder_on_the_loader_path(repo_paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    profile = load_profile(repo_paths, SGLANG)
    files = [_runtime(tmp_path, "nvidia/cu13/lib"), _wheel(tmp_path, "torch-memory-saver", "0.0.10", ["tms/x.so"])]
    env = dict(_env(profile, files, 0))
    assert env["LD_LIBRARY_PATH"] == f"{SITE}/nvidia/cu13/lib"


def test_cuda_12_wheels_keep_the_runtime_in_their_own_folder(repo_paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    profile = load_profile(repo_paths, SGLANG)
    runtime = _wheel(tmp_path, "nvidia-cuda-runtime-cu12", "12.8.90", ["nvidia/cuda_runtime/lib/libcudart.so.12"])
    files = [runtime, _wheel(tmp_path, "torch-memory-saver", "0.0.10", ["tms/x.so"])]
    assert dict(_env(profile, files, 0))["LD_LIBRARY_PATH"] == f"{SITE}/nvidia/cuda_runtime/lib"


def test_without_such_a_hook_the_environment_leaves_the_loader_path_alone(repo_paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    profile = load_profile(repo_paths, SGLANG)
    env = dict(_env(profile, [_runtime(tmp_path, "nvidia/cu13/lib")], 0))
    assert "LD_LIBRARY_PATH" not in env
    assert "LD_LIBRARY_PATH" not in dict(_env(profile, [_wheel(tmp_path, "torch-memory-saver", "0.0.10", [])], 0))
