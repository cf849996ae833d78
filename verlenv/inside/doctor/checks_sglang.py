"""sglang-jit: SGLang compiles its elementwise kernels with nvcc and the host's g++ the first time its
engine captures CUDA graphs. On the H100 (2026-12-07) SGLang 0.5.12's activation kernel failed to
compile with Debian 12's g++ 12.2 ("no matching function for call to ... select_kernel<true>"), so
every SGLang rollout died in its scheduler; the same nvcc and source compile with g++ 13.3. The check
compiles that kernel the way SGLang's JIT does (tvm-ffi's headers first, one exported instantiation),
with no GPU: the build's self-check runs it, so such an image is never tagged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from verlenv.inside.doctor.checks_toolchain import run_compiler
from verlenv.inside.doctor.model import Facts, Result, Status

KERNEL = "jit_kernel/csrc/elementwise/activation.cuh"
TVM_HEADERS = ("container/tensor.h", "dtype.h", "error.h", "extra/c_env_api.h", "function.h")
WRAPPER = "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_activation, (ActivationKernel<bf16_t, true>::run_activation));\n"
ARCH = "90"  # the kernel's host-side C++ is what fails; any architecture shows it
TIMEOUT_S = 300.0
FIX = (
    "SGLang's JIT kernels need g++ 13 or newer (this one compiles with g++ 13.3 and not with 12.2): use an "
    "image whose base has g++ >= 13 (Debian 13, Ubuntu 24.04), or point nvcc at one: "
    "NVCC_PREPEND_FLAGS='-ccbin /path/to/g++-13'"
)


def source(sglang: Path) -> str:
    includes = [f"#include <tvm/ffi/{header}>" for header in TVM_HEADERS]
    return "\n".join([*includes, f'#include "{sglang / KERNEL}"', WRAPPER])


def command(nvcc: str, sglang: Path, tvm_ffi: Path, src: Path, out: Path) -> list[str]:
    """SGLang's flags for this kernel (jit_kernel/utils.py, activation.py) on one architecture."""
    gencode = f"-gencode=arch=compute_{ARCH},code=sm_{ARCH}"
    return [
        nvcc, "-Xcompiler", "-fPIC", gencode, f"-DSGL_CUDA_ARCH={ARCH}0", "-std=c++20", "-O3",
        "--expt-relaxed-constexpr", "--use_fast_math", f"-I{tvm_ffi / 'include'}", f"-I{sglang / 'jit_kernel/include'}",
        "-c", str(src), "-o", str(out),
    ]  # fmt: skip


def host_compiler(env: dict[str, str]) -> str:
    """The g++ nvcc runs (its default: the first in PATH), with its version."""
    compiler = shutil.which("g++", path=env.get("PATH", ""))
    if not compiler:
        return "no g++"
    try:
        first = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return compiler
    return f"{compiler} ({first.splitlines()[0] if first else 'version unknown'})"


def check_sglang_jit(facts: Facts) -> Result:
    if "sglang" not in facts.dists:
        return Result(Status.SKIP, "SGLang is not installed")
    sglang, tvm_ffi = facts.site / "sglang", facts.site / "tvm_ffi"
    if not (sglang / KERNEL).is_file() or not (tvm_ffi / "include").is_dir():
        return Result(Status.SKIP, f"this SGLang has no {KERNEL} with tvm-ffi's headers: nothing of its JIT to try")
    env = dict(os.environ)
    nvcc = Path(env.get("CUDA_HOME", "")) / "bin" / "nvcc"
    if not env.get("CUDA_HOME") or not nvcc.is_file():
        return Result(Status.SKIP, "no nvcc under CUDA_HOME: jit-toolchain says what SGLang's JIT lacks")
    return judge(compile_kernel(str(nvcc), sglang, tvm_ffi, env), host_compiler(env))


def compile_kernel(nvcc: str, sglang: Path, tvm_ffi: Path, env: dict[str, str]) -> str:
    """'' when SGLang's activation kernel compiled, else the compiler's first errors."""
    with tempfile.TemporaryDirectory(prefix="verlenv-sglang-jit-") as tmp:
        src = Path(tmp) / "cuda.cu"
        src.write_text(source(sglang))
        return run_compiler(command(nvcc, sglang, tvm_ffi, src, Path(tmp) / "cuda.o"), env, timeout=TIMEOUT_S)


def judge(failed: str, compiler: str) -> Result:
    if not failed:
        return Result(Status.OK, f"SGLang's activation JIT kernel compiles for sm_{ARCH} with nvcc and {compiler}")
    return Result(
        Status.FAIL,
        f"SGLang's JIT kernel {KERNEL.rsplit('/', 1)[-1]} does not compile with {compiler}: every SGLang rollout "
        "dies when its engine captures CUDA graphs",
        (failed,),
        fix=FIX,
    )
