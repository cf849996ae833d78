"""sglang-jit against SGLang 0.5.12's real JIT sources, this machine's nvcc 13.0 and its g++: the kernel
whose compile failure killed every SGLang rollout on the H100 (2026-12-07)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from verlenv.inside.doctor import checks_sglang
from verlenv.inside.doctor.model import Facts, Status

CUDA_13 = Path("/usr/local/cuda-13.0")
WHEELS = ("sglang==0.5.12", "apache-tvm-ffi==0.1.9")
WANTED = re.compile(r"^(sglang/jit_kernel/|tvm_ffi/include/|[^/]+\.dist-info/(METADATA|RECORD)$)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site-packages with SGLang's JIT sources and tvm-ffi's headers from the published wheels."""
    wheels = tmp_path_factory.mktemp("wheels")
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(wheels)]
    tags = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64")  # pip takes only the platforms it is given
    platform = ["--python-version", "3.11", *(arg for tag in tags for arg in ("--platform", tag))]
    subprocess.run([*download, *platform, *WHEELS], check=True, capture_output=True)
    root = tmp_path_factory.mktemp("site")
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(root, [n for n in archive.namelist() if WANTED.match(n)])
    return root


def _nvcc() -> Path:
    nvcc = CUDA_13 / "bin" / "nvcc"
    if not nvcc.is_file():
        pytest.fail(f"{nvcc} is missing on this machine: this test needs a real nvcc")
    return nvcc


def _gxx_major() -> int:
    return int(subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True, check=True).stdout.split(".")[0])


def test_sglangs_activation_kernel_is_judged_by_the_real_compile(site: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CUDA_HOME", str(_nvcc().parent.parent))
    monkeypatch.delenv("NVCC_PREPEND_FLAGS", raising=False)
    result = checks_sglang.check_sglang_jit(Facts(site=site))
    if _gxx_major() >= 13:
        assert result.status is Status.OK, result
        return
    # Debian 12's g++ 12.2, as in the image that failed on the H100
    assert result.status is Status.FAIL, result
    assert "activation.cuh does not compile with" in result.summary and "g++" in result.summary
    assert "select_kernel" in result.details[0] and "activation.cuh" in result.details[0]
    assert "g++ 13 or newer" in result.fix


def test_the_generated_source_includes_the_installed_kernel(site: Path) -> None:
    text = checks_sglang.source(site / "sglang")
    assert f'#include "{site}/sglang/jit_kernel/csrc/elementwise/activation.cuh"' in text
    assert text.index("tvm/ffi/function.h") < text.index("activation.cuh")  # tvm-ffi's headers first, as SGLang's


def test_no_sglang_no_check(tmp_path: Path) -> None:
    assert checks_sglang.check_sglang_jit(Facts(site=tmp_path)).status is Status.SKIP


def test_an_sglang_without_nvcc_leaves_it_to_jit_toolchain(site: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("CUDA_HOME", raising=False)
    result = checks_sglang.check_sglang_jit(Facts(site=site))
    assert result.status is Status.SKIP and "jit-toolchain" in result.summary
