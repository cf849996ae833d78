"""jit-toolchain: the compilers the stack uses at run time, tried for real (C extension, C++17 with
OpenMP, nvcc), each failure naming what is missing and the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from verlenv.inside.doctor.checks_toolchain import (
    FIX_C,
    FIX_PYTHON_H,
    c_compiler,
    cuda,
    cuda_link,
    cxx,
    findings,
    python_include,
)

CUDA_13 = Path("/usr/local/cuda-13.0")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "CUDA_HOME", "CUDA_PATH", "NVCC_APPEND_FLAGS")}
    return {**env, **extra}


def test_a_real_c_extension_and_cxx_compile_here() -> None:
    found = findings(_env(), python_include(), set())
    assert [f.ok for f in found] == [True, True], [f.line for f in found]
    assert "loaded" in found[0].line and "OpenMP" in found[1].line


def test_no_compiler_on_path_fails_the_way_triton_would(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    found = findings(_env(PATH=str(empty)), python_include(), set())
    assert not found[0].ok and "no C compiler (CC, gcc, clang)" in found[0].line and found[0].fix == FIX_C
    assert not found[1].ok and "InvalidCxxCompiler" in found[1].line and "g++" in found[1].fix


def test_cc_wins_over_gcc_as_in_triton(tmp_path: Path) -> None:
    assert c_compiler(_env(CC="/opt/my/cc")) == "/opt/my/cc"
    assert c_compiler(_env()) == shutil.which("gcc")


def test_missing_python_h_is_named(tmp_path: Path) -> None:
    found = findings(_env(), tmp_path, set())
    assert not found[0].ok and f"no Python.h in {tmp_path}" in found[0].line and found[0].fix == FIX_PYTHON_H


def test_a_compiler_that_cannot_build_is_reported_with_its_error(tmp_path: Path) -> None:
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc1: error: out of memory' >&2\nexit 1\n")
    broken.chmod(0o755)
    found = findings(_env(CC=str(broken), CXX=str(broken)), python_include(), set())
    assert not found[0].ok and "cc1: error: out of memory" in found[0].line
    assert not found[1].ok


def test_a_cuda_jit_package_without_nvcc_fails_naming_it(tmp_path: Path) -> None:
    result = cuda(tmp_path, _env(), {"flashinfer-python"})
    assert result is not None and not result.ok
    assert "flashinfer-python compile CUDA at run time, but CUDA_HOME has no bin/nvcc (unset)" in result.line


def test_no_cuda_users_no_cuda_check(tmp_path: Path) -> None:
    assert cuda(tmp_path, _env(), {"torch"}) is None


def test_the_machines_cuda_13_toolkit_preprocesses_cccl(tmp_path: Path) -> None:
    if not (CUDA_13 / "bin" / "nvcc").is_file():
        pytest.fail(f"{CUDA_13}/bin/nvcc is missing on this machine: this test needs a real nvcc")
    result = cuda(tmp_path, _env(CUDA_HOME=str(CUDA_13)), {"flashinfer-python"})
    assert result is not None and result.ok, result.line


def test_cxx_without_openmp_support_is_caught(tmp_path: Path) -> None:
    fake = tmp_path / "g++"
    script = 'for a in "$@"; do [ "$a" = -fopenmp ] && { echo "error: omp.h: No such file" >&2; exit 1; }; done'
    fake.write_text(f"#!/bin/sh\n{script}\nexit 0\n")
    fake.chmod(0o755)
    result = cxx(tmp_path, _env(CXX=str(fake)))
    assert not result.ok and "omp.h" in result.line


def _pip_cuda(tmp_path: Path) -> Path:
    """pip's CUDA layout (nvidia/cu13): lib/libcudart.so.13 only, no lib64, no stubs."""
    home = tmp_path / "cu13"
    (home / "lib").mkdir(parents=True)
    source = tmp_path / "cudart.c"
    source.write_text("int cudaFree(void *p) { return 0; }\n")
    cc = c_compiler(_env())
    soname = "-Wl,-soname,libcudart.so.13"
    target = home / "lib" / "libcudart.so.13"
    subprocess.run([cc, "-shared", "-fPIC", soname, str(source), "-o", str(target)], check=True)
    return home


def _lay_out(root: Path, items) -> None:  # type: ignore[no-untyped-def]
    from verlenv.image.tarlayer import DIR, SYMLINK

    for item in items:
        path = root / item.entry.path
        if item.entry.kind == DIR:
            path.mkdir(parents=True, exist_ok=True)
        elif item.entry.kind == SYMLINK:
            path.symlink_to(item.entry.target)
        else:
            path.write_bytes(item.open().read())


def test_flashinfers_jit_link_fails_on_pips_cuda_layout_and_passes_with_the_images_links(tmp_path: Path) -> None:
    """FlashInfer links -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda (seen on the H200)."""
    from verlenv.image.build import cuda_link_entries

    home = _pip_cuda(tmp_path)
    bare = cuda_link(tmp_path, _env(), str(home), driver=False)
    assert not bare.ok and "-lcudart" in bare.line and "lib64" in bare.fix
    _lay_out(tmp_path, cuda_link_entries("cu13", "13"))
    assert cuda_link(tmp_path, _env(), str(home), driver=False).ok
    # -lcuda goes through the stub, a linker script naming libcuda.so.1, found on LIBRARY_PATH
    driver = tmp_path / "driver"
    driver.mkdir()
    no_driver_lib = cuda_link(tmp_path, _env(), str(home), driver=True)
    assert not no_driver_lib.ok and "libcuda.so.1" in no_driver_lib.line
    fake = tmp_path / "cuda.c"
    fake.write_text("int cuInit(unsigned f) { return 0; }\n")
    soname = "-Wl,-soname,libcuda.so.1"
    target = driver / "libcuda.so.1"
    subprocess.run([c_compiler(_env()), "-shared", "-fPIC", soname, str(fake), "-o", str(target)], check=True)
    linked = cuda_link(tmp_path, _env(LIBRARY_PATH=str(driver)), str(home), driver=True)
    assert linked.ok and "-lcudart -lcuda link" in linked.line


def test_the_cuda_link_entries_make_a_normalized_layer(tmp_path: Path) -> None:
    import tarfile

    from verlenv.image.build import LIBCUDA_SCRIPT, cuda_link_entries
    from verlenv.image.tarlayer import write_layer

    home = "opt/venv/lib/python3.11/site-packages/nvidia/cu13"
    items = cuda_link_entries(home, "13")
    info = write_layer(list(items), tmp_path / "layer.tar", 1790294400)
    assert "\n".join(i.entry.line() for i in items)  # the layer key spells each entry out
    with tarfile.open(tmp_path / "layer.tar") as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
        script = tar.extractfile(f"{home}/lib/stubs/libcuda.so").read()  # type: ignore[union-attr]
    assert links == {f"{home}/lib64": "lib", f"{home}/lib/libcudart.so": "libcudart.so.13"}
    assert script == LIBCUDA_SCRIPT and info.diff_id.startswith("sha256:")
