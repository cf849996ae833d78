"""Object normalization: two nvcc compiles of one real .cu differ only in nvcc's temp-file PID, and
are equal (and link to equal libraries) once objnorm has zeroed it."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import cuda
from verlenv.image import objnorm

KERNEL = """
#include <cstdio>
__global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
static struct Greeter { Greeter() { std::printf("loaded\\n"); } } greeter;  // a static constructor, as in real kernels
void launch(float* x, int n) { twice<<<(n + 255) / 256, 256>>>(x, n); }
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_nvcc_compiles_match_once_normalized_and_link_the_same(tmp_path: Path) -> None:
    nvcc = cuda.nvcc()
    source = tmp_path / "kernel.cu"
    source.write_text(KERNEL)
    objects = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        obj = tmp_path / name / "kernel.o"
        subprocess.run([nvcc, "-c", "-arch=sm_90", "-Xcompiler", "-fPIC", str(source), "-o", str(obj)], check=True)
        objects.append(obj)
    one, two = objects
    assert _sha(one) != _sha(two), "nvcc gave equal objects: its PID no longer reaches them"
    assert objnorm.TEMP_NAME.search(one.read_bytes())
    sizes = [one.stat().st_size, two.stat().st_size]

    assert [objnorm.normalize_tree(tmp_path / n) for n in ("one", "two")] == [(1, 1), (1, 1)]
    assert _sha(one) == _sha(two) and [one.stat().st_size, two.stat().st_size] == sizes
    assert set(objnorm.TEMP_NAME.findall(one.read_bytes())) == {objnorm.FIXED}
    assert objnorm.normalize(one) is False  # idempotent

    libraries = []
    for obj in objects:
        library = obj.with_suffix(".so")
        subprocess.run(["g++", "-shared", str(obj), "-o", str(library)], check=True)
        libraries.append(_sha(library))
    assert libraries[0] == libraries[1]


def test_only_the_pid_field_changes_and_mode_and_mtime_are_kept(tmp_path: Path) -> None:
    obj = tmp_path / "x.o"
    obj.write_bytes(b"\x7fELF..tmpxft_0001a2b3_00000000-6_k.cudafe1.cpp\x00tmpxft_zzzzzzzz_\x00")
    obj.chmod(0o640)
    os.utime(obj, ns=(5, 1_700_000_000_123_456_789))
    assert objnorm.normalize(obj) is True
    assert obj.stat().st_mtime_ns == 1_700_000_000_123_456_789  # ninja would compile it again otherwise
    assert obj.read_bytes() == b"\x7fELF..tmpxft_00000000_00000000-6_k.cudafe1.cpp\x00tmpxft_zzzzzzzz_\x00"
    assert obj.stat().st_mode & 0o777 == 0o640
    assert not list(tmp_path.glob(".*objnorm"))


def test_an_object_without_the_name_is_left_untouched(tmp_path: Path) -> None:
    obj = tmp_path / "plain.o"
    obj.write_bytes(b"\x7fELF plain C++ object")
    os.utime(obj, (1, 1))
    assert objnorm.normalize_tree(tmp_path) == (1, 0)
    assert obj.stat().st_mtime == 1


def test_main_wants_one_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert objnorm.main([]) == 2 and objnorm.main([str(tmp_path / "missing")]) == 2
    assert "usage: objnorm.py BUILD-FOLDER" in capsys.readouterr().err
    assert objnorm.main([str(tmp_path)]) == 0
    assert "0 of 0 object file(s)" in capsys.readouterr().out
