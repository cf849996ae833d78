"""cudafe++'s PID: two nvcc compiles of a real .cu with an internal-linkage device variable differ
even after objnorm, and are equal when pidpin.c, compiled by the recipe's own shell line, is
preloaded. The line under test is the one extbuild's recipe runs in the build container."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

from tests.helpers import cuda
from verlenv.image import extbuild, objnorm
from verlenv.profiles.profile import ExtensionBuild

# Only a template specialization is defined, so cudafe++ has no external name to borrow and names
# the anonymous-namespace variable _INTERNAL_…_cu_<hash>_<pid>, as in flash-attn's kernel files.
KERNEL = """
namespace { __device__ int counter; }
template <typename T> __global__ void fill(T* out) { *out = counter; }
template <typename T> void launch(T* out);
template <> void launch<int>(int* out) { fill<int><<<1, 1>>>(out); }
"""
INTERNAL = re.compile(rb"(\d+)(_INTERNAL_)")
PID_SUFFIX = re.compile(rb"_cu_[0-9a-f]{8}_(\d+)$")


def _pids(data: bytes) -> set[bytes]:
    """The numbers that end the internal names: a mangled name gives its length first, which is
    what separates the PID from the digits that follow it."""
    found = set()
    for match in INTERNAL.finditer(data):
        name = data[match.start(2) : match.start(2) + int(match.group(1))]
        suffix = PID_SUFFIX.search(name)
        if suffix:
            found.add(suffix.group(1))
    return found


def _compile(source: Path, obj: Path, preload: str | None) -> bytes:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    subprocess.run([cuda.nvcc(), "-c", "-arch=sm_90", str(source), "-o", str(obj)], check=True, env=env)
    objnorm.normalize(obj)
    return obj.read_bytes()


def _pinned_library(tmp_path: Path) -> str:
    """Run the recipe's own line, with its /tmp path moved into tmp_path."""
    library = tmp_path / "pidpin.so"
    line = extbuild.pin_pid().replace(extbuild.PIDPIN_SO, str(library))
    result = subprocess.run(["bash", "-c", f"{line} && echo $LD_PRELOAD"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(library)
    return str(library)


def test_cudafe_pid_differs_unpinned_and_is_fixed_when_preloaded(tmp_path: Path) -> None:
    source = tmp_path / "kernel.cu"
    source.write_text(KERNEL)
    plain = [_compile(source, tmp_path / f"plain{i}.o", None) for i in (1, 2)]
    assert plain[0] != plain[1], "cudafe++ no longer writes its PID: pidpin may be dropped"
    assert _pids(plain[0]) and _pids(plain[0]) != _pids(plain[1]), "no PID-bearing internal name was made"

    library = _pinned_library(tmp_path)
    pinned = [_compile(source, tmp_path / f"pinned{i}.o", library) for i in (1, 2)]
    assert hashlib.sha256(pinned[0]).digest() == hashlib.sha256(pinned[1]).digest()
    assert _pids(pinned[0]) == {b"1"}


def test_other_programs_keep_their_real_pid(tmp_path: Path) -> None:
    library = _pinned_library(tmp_path)
    env = {**os.environ, "LD_PRELOAD": library}
    script = "import os; print(os.getpid(), os.getpid() == int(open('/proc/self/stat').read().split()[0]))"
    out = subprocess.run(["python3", "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    pid, real = out.split()
    assert real == "True" and pid != "1"


def test_the_recipe_preloads_the_pin_before_anything_compiles() -> None:
    build = ExtensionBuild("flash-attn", "2.8.3", ("90",), ("torch",), (), "x")
    command, variables = extbuild.recipe(build, {}, "flash_attn-2.8.3", 2)
    assert "LD_PRELOAD" not in variables  # the library exists only once the command has made it
    steps = command.split(" && ")
    first_wheel = next(i for i, step in enumerate(steps) if "pip wheel" in step)
    assert steps.index(f"export LD_PRELOAD={extbuild.PIDPIN_SO}") < first_wheel
