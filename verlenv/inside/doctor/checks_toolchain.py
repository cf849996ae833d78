"""What the stack compiles at run time, tried for real (field-notes §10).

Triton builds its driver module (cuda_utils.c) with a C compiler against Python.h in every process
that launches a kernel, finding the compiler as CC, then gcc, then clang; Inductor (torch.compile,
vLLM's default mode) compiles C++17 with OpenMP for CPU code; FlashInfer, DeepGEMM and SGLang's
kernels compile CUDA with nvcc from CUDA_HOME. An image without them passes every import and fails
the first time vLLM starts in its default mode. So this check compiles and loads a tiny extension,
compiles a C++ file the way Inductor does, and preprocesses a CUDA file through the locked nvcc;
on a GPU, `triton-jit` also runs a one-kernel Triton program.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verlenv.inside.doctor.model import Facts, Result, Status

C_EXTENSION = r"""
#include <Python.h>
static PyObject* answer(PyObject* self, PyObject* args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, 0}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "verlenv_jit_probe", 0, -1, methods};
PyMODINIT_FUNC PyInit_verlenv_jit_probe(void) { return PyModule_Create(&module); }
"""
CXX_SOURCE = r"""
#include <omp.h>
#include <vector>
#include <cmath>
extern "C" double kernel(int n) {
  std::vector<double> v(n);
  #pragma omp parallel for
  for (int i = 0; i < n; ++i) v[i] = std::sqrt(double(i));
  return v.empty() ? 0.0 : v.back();
}
"""
# libcu++ from CCCL: what FlashInfer's and CUTLASS's sources include first.
CUDA_SOURCE = "#include <cuda/std/cstdint>\n__global__ void k(cuda::std::int32_t* x) { x[0] += 1; }\n"
CUDA_JIT_PACKAGES = ("flashinfer-python", "deep-gemm", "sgl-kernel", "sglang-kernel")
TIMEOUT_S = 60.0
FIX_C = "Debian: apt-get install gcc libc6-dev (verlenv's debian bases carry them); or set CC to a C compiler"
FIX_PYTHON_H = "Debian: apt-get install python3-dev (Triton compiles its driver module against Python.h)"


@dataclass(frozen=True)
class Finding:
    ok: bool
    line: str
    fix: str = ""


def c_compiler(env: dict[str, str]) -> str:
    """Triton's choice: CC, else gcc, else clang (triton/runtime/build.py)."""
    if env.get("CC"):
        return env["CC"]
    path = env.get("PATH", "")
    return shutil.which("gcc", path=path) or shutil.which("clang", path=path) or ""


def cxx_compiler(env: dict[str, str]) -> str:
    """Inductor's choice: CXX, else g++ (torch._inductor.config.cpp.cxx)."""
    return env.get("CXX") or shutil.which("g++", path=env.get("PATH", "")) or ""


def python_include() -> Path:
    return Path(sysconfig.get_paths()["include"])


def c_extension(work: Path, env: dict[str, str], include: Path) -> Finding:
    compiler = c_compiler(env)
    if not compiler:
        return Finding(False, "no C compiler (CC, gcc, clang): Triton cannot build its driver module", FIX_C)
    if not (include / "Python.h").is_file():
        return Finding(False, f"no Python.h in {include}: Triton's driver module cannot compile", FIX_PYTHON_H)
    source = work / "probe.c"
    source.write_text(C_EXTENSION)
    target = work / f"verlenv_jit_probe{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    failed = run_compiler([compiler, "-shared", "-fPIC", "-O0", f"-I{include}", str(source), "-o", str(target)], env)
    if failed:
        return Finding(False, f"{compiler} cannot build a Python extension: {failed}", FIX_C)
    loaded = _load(target)
    if loaded != 42:
        return Finding(False, f"a C extension built by {compiler} does not load: {loaded}", FIX_C)
    return Finding(True, f"C extension built with {compiler} against {include}/Python.h and loaded")


def _load(target: Path) -> object:
    try:
        spec = importlib.util.spec_from_file_location("verlenv_jit_probe", target)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.answer()
    except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
        return f"{type(exc).__name__}: {exc}"


def cxx(work: Path, env: dict[str, str]) -> Finding:
    compiler = cxx_compiler(env)
    fix = "Debian: apt-get install g++ (torch.compile's CPU code is C++17 with OpenMP); or set CXX"
    if not compiler:
        return Finding(False, "no C++ compiler (CXX, g++): torch.compile raises InvalidCxxCompiler", fix)
    source = work / "kernel.cpp"
    source.write_text(CXX_SOURCE)
    out = work / "kernel.so"
    flags = ["-std=c++17", "-shared", "-fPIC", "-fopenmp", "-O1"]
    failed = run_compiler([compiler, *flags, str(source), "-o", str(out)], env)
    if failed:
        return Finding(False, f"{compiler} cannot compile C++17 with OpenMP as Inductor does: {failed}", fix)
    return Finding(True, f"C++17 with OpenMP compiled by {compiler}")


def cuda(work: Path, env: dict[str, str], installed: set[str]) -> Finding | None:
    """nvcc from CUDA_HOME, when a package here compiles CUDA at run time (or CUDA_HOME is set)."""
    users = sorted(installed & set(CUDA_JIT_PACKAGES))
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or ""
    if not users and not home:
        return None
    who = ", ".join(users) or "CUDA_HOME"
    locked = _locked_toolkit(installed)
    fix = f"set CUDA_HOME={locked}" if locked else "install a CUDA toolkit (nvcc) and set CUDA_HOME to it"
    if not home or not (Path(home) / "bin" / "nvcc").is_file():
        return Finding(False, f"{who} compile CUDA at run time, but CUDA_HOME has no bin/nvcc ({home or 'unset'})", fix)
    source = work / "probe.cu"
    source.write_text(CUDA_SOURCE)
    nvcc = str(Path(home) / "bin" / "nvcc")
    failed = run_compiler([nvcc, "-E", "-x", "cu", str(source), "-o", os.devnull], env)
    if failed:
        hint = (
            "the CUDA compiler and runtime headers come from different CUDA minors; CCCL's escape hatch is "
            "NVCC_APPEND_FLAGS=-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK, or lock nvidia-cuda-nvcc to the runtime's minor"
        )
        return Finding(False, f"{nvcc} cannot preprocess CUDA that includes CCCL: {failed}", hint)
    note = ""
    if "CCCL_DISABLE_CTK_COMPATIBILITY_CHECK" in env.get("NVCC_APPEND_FLAGS", ""):
        note = " (CCCL's compiler/headers version check is off: NVCC_APPEND_FLAGS)"
    linked = cuda_link(work, env, home)
    if not linked.ok:
        return linked
    return Finding(True, f"nvcc at {home} preprocesses CUDA with CCCL for {who}{note}; {linked.line}")


def cuda_link(work: Path, env: dict[str, str], home: str, driver: bool | None = None) -> Finding:
    """The link FlashInfer's JIT runs (-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda):
    pip's CUDA has lib/, no lib64, no unversioned libcudart.so and no stubs. -lcuda needs the driver's
    libcuda.so.1, so it is tried where a driver is."""
    source = work / "link.c"
    source.write_text("int verlenv_link_probe(void) { return 0; }\n")
    compiler = cxx_compiler(env) or c_compiler(env)
    if driver is None:
        driver = Path("/proc/driver/nvidia/version").exists()
    libs = ["-lcudart"] + (["-lcuda"] if driver else [])
    command = [compiler, "-shared", "-fPIC", str(source), f"-L{home}/lib64", f"-L{home}/lib64/stubs", *libs]
    failed = run_compiler([*command, "-o", str(work / "link.so")], env)
    if failed:
        fix = (
            f"give {home} a lib64 (-> lib), lib/libcudart.so (-> libcudart.so.N) and lib/stubs/libcuda.so; "
            "images verlenv builds carry them, and the driver's libcuda.so.1 must be on the linker's path "
            "(a default library folder, or LIBRARY_PATH)"
        )
        return Finding(False, f"FlashInfer's JIT link fails ({' '.join(libs)}): {failed}", fix)
    return Finding(True, f"{' '.join(libs)} link" + ("" if "-lcuda" in libs else " (-lcuda: on GPU nodes)"))


def _locked_toolkit(installed: set[str]) -> str:
    if "nvidia-cuda-nvcc" not in installed:
        return ""
    for root in (Path(p) for p in sys.path if p.endswith("site-packages")):
        for candidate in sorted((root / "nvidia").glob("cu*/bin/nvcc")):
            return str(candidate.parent.parent)
    return ""


def run_compiler(command: list[str], env: dict[str, str], timeout: float = TIMEOUT_S) -> str:
    """'' when the command succeeded, else the last lines of what it said."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode == 0:
        return ""
    lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
    errors = [line for line in lines if "cannot find" in line] or [line for line in lines if "error" in line.lower()]
    return " / ".join((errors or lines)[:2]) or f"exit {proc.returncode}"


def findings(env: dict[str, str], include: Path, installed: set[str]) -> list[Finding]:
    with tempfile.TemporaryDirectory(prefix="verlenv-jit-") as tmp:
        work = Path(tmp)
        found = [c_extension(work, env, include), cxx(work, env)]
        cuda_finding = cuda(work, env, installed)
        return [*found, *([cuda_finding] if cuda_finding else [])]


def check_jit_toolchain(facts: Facts) -> Result:
    found = findings(dict(os.environ), python_include(), set(facts.dists))
    failed = [f for f in found if not f.ok]
    details = tuple(("ok    " if f.ok else "FAIL  ") + f.line for f in found)
    if failed:
        return Result(
            Status.FAIL,
            f"{len(failed)} of {len(found)} run-time compile step(s) fail: {failed[0].line}",
            details,
            fix="; ".join(dict.fromkeys(f.fix for f in failed if f.fix)),
        )
    return Result(Status.OK, f"C, C++ and {'CUDA ' if len(found) > 2 else ''}JIT compiles work here", details)


TRITON_PROGRAM = r"""
import torch, triton, triton.language as tl
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
x = torch.zeros(1000, device="cuda")
add_one[(4,)](x, 1000, BLOCK=256)
torch.cuda.synchronize()
assert float(x.sum()) == 1000.0, float(x.sum())
print("TRITON-OK", triton.__version__)
"""


def check_triton(facts: Facts) -> Result:
    if "triton" not in facts.dists:
        return Result(Status.SKIP, "Triton is not installed")
    if not Path("/dev/nvidiactl").exists() and not Path("/proc/driver/nvidia/version").exists():
        return Result(Status.SKIP, "no NVIDIA GPU here: the Triton kernel runs on GPU nodes")
    try:
        with tempfile.TemporaryDirectory(prefix="verlenv-triton-") as tmp:
            program = Path(tmp) / "one_kernel.py"  # @triton.jit reads its function's source from a file
            program.write_text(TRITON_PROGRAM)
            proc = subprocess.run(
                [sys.executable, str(program)], capture_output=True, text=True, timeout=TIMEOUT_S * 3, check=False
            )
    except subprocess.TimeoutExpired:
        return Result(Status.FAIL, f"a one-kernel Triton program did not finish in {TIMEOUT_S * 3:.0f}s")
    if proc.returncode == 0 and "TRITON-OK" in proc.stdout:
        return Result(Status.OK, f"a Triton kernel compiled and ran (triton {proc.stdout.split()[-1]})")
    tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-3:]
    return Result(
        Status.FAIL,
        "a one-kernel Triton program failed: " + (tail[-1] if tail else f"exit {proc.returncode}"),
        tuple(tail),
        fix=f"{FIX_C}; {FIX_PYTHON_H}",
    )
