"""Real ELF fixtures: tiny C++ libraries compiled with g++ in the test, packed as wheels.

``fake torch``: torch/lib/libc10.so and torch/lib/libtorch_cpu.so exporting a few c10:: / at::
symbols, built with a chosen C++ string ABI. ``fakeext``: an extension that NEEDs them.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

C10 = r"""
#include <string>
namespace c10 {
struct SourceLocation { const char* file; int line; };
struct Error { Error(SourceLocation loc, std::string msg); std::string what_; };
Error::Error(SourceLocation, std::string msg) : what_(msg) {}
int version() { return 26; }
}
"""
TORCH_CPU = r"""
#include <string>
namespace c10 { int version(); }
namespace at {
int add(int a, int b) { return a + b + c10::version(); }
%(extra)s
}
"""
EXT = r"""
#include <string>
#include <pthread.h>
namespace c10 {
struct SourceLocation { const char* file; int line; };
struct Error { Error(SourceLocation loc, std::string msg); std::string what_; };
void optional_hook() __attribute__((weak));
}
namespace at { int add(int a, int b); int mul(int a, int b); }
%(extern_missing)s
extern "C" int ext_entry(int x) {
    if (c10::optional_hook) c10::optional_hook();
    c10::Error e({"f", 1}, std::string("boom"));
    %(use_pthread)s
    %(use_missing)s
    return at::add(x, 1) + at::mul(x, 2) + (int)e.what_.size();
}
"""


# Enough of torch's Python surface for doctor's import probe (version, CUDA facts, NCCL).
TORCH_INIT = b"""__version__ = "2.6.0"
class version:
    cuda = None
class _C:
    _GLIBCXX_USE_CXX11_ABI = True
class cuda:
    @staticmethod
    def is_available():
        return False
    @staticmethod
    def get_arch_list():
        return []
    class nccl:
        @staticmethod
        def version():
            raise RuntimeError("CPU build")
"""


@dataclass(frozen=True)
class Variant:
    torch_abi: int = 1  # _GLIBCXX_USE_CXX11_ABI for the fake torch
    ext_abi: int = 1  # ... and for the extension
    torch_has_mul: bool = True  # drop at::mul to make one symbol go missing
    ext_needs_missing_lib: bool = False  # link the extension against a library no wheel ships
    ext_uses_pthread: bool = False  # pulls in GLIBC_2.34 (pthread_create moved into libc)


def compile_so(out: Path, source: str, abi: int, *, libs: list[Path] = (), soname: str = "") -> Path:  # type: ignore[assignment]
    src = out.with_suffix(".cpp")
    src.write_text(source)
    cmd = ["g++", "-shared", "-fPIC", "-O0", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-o", str(out), str(src)]
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    for lib in libs:
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def build_wheel(dest: Path, name: str, version: str, files: dict[str, bytes], requires: list[str] = ()) -> Path:  # type: ignore[assignment]
    """A valid wheel (METADATA, WHEEL, RECORD) holding ``files``."""
    tag = "cp311-cp311-manylinux_2_17_x86_64"
    dist_info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    entries = {
        **files,
        f"{dist_info}/METADATA": meta.encode(),
        f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    lines = "".join(f"{p},sha256={record_digest(d)},{len(d)}\n" for p, d in entries.items())
    record = lines + f"{dist_info}/RECORD,,\n"
    entries[f"{dist_info}/RECORD"] = record.encode()
    path = dest / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in entries.items():
            archive.writestr(member, data)
    return path


def record_digest(data: bytes) -> str:
    """A file's digest as a wheel's RECORD writes it (urlsafe base64 of its sha256, no padding)."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_pair(work: Path, variant: Variant) -> tuple[Path, Path]:
    """(torch wheel, fakeext wheel) for ``variant``; every .so compiled for real."""
    if not shutil.which("g++"):
        raise RuntimeError("g++ is needed to build the ELF fixtures (apt-get install g++)")
    work.mkdir(parents=True, exist_ok=True)
    c10 = compile_so(work / "libc10.so", C10, variant.torch_abi, soname="libc10.so")
    extra = "int mul(int a, int b) { return a * b; }" if variant.torch_has_mul else ""
    torch_cpu = compile_so(
        work / "libtorch_cpu.so", TORCH_CPU % {"extra": extra}, variant.torch_abi, libs=[c10], soname="libtorch_cpu.so"
    )
    libs = [c10, torch_cpu]
    missing_decl = missing_use = ""
    if variant.ext_needs_missing_lib:
        stub = compile_so(
            work / "libvendor_missing.so", 'extern "C" int vendor_fn() { return 1; }', 1, soname="libvendor_missing.so"
        )
        libs.append(stub)
        missing_decl, missing_use = 'extern "C" int vendor_fn();', "x += vendor_fn();"
    pthread = (
        "pthread_t t; if (x < -1000) pthread_create(&t, nullptr, nullptr, nullptr);" if variant.ext_uses_pthread else ""
    )
    # Heap-allocated mul forces a c10::Error ctor reference in the chosen string ABI.
    ext = compile_so(
        work / "_C.so",
        EXT % {"extern_missing": missing_decl, "use_pthread": pthread, "use_missing": missing_use},
        variant.ext_abi,
        libs=libs,
    )
    torch_wheel = build_wheel(
        work,
        "torch",
        "2.6.0",
        {
            "torch/__init__.py": TORCH_INIT,
            "torch/lib/libc10.so": c10.read_bytes(),
            "torch/lib/libtorch_cpu.so": torch_cpu.read_bytes(),
        },
    )
    ext_wheel = build_wheel(
        work,
        "fakeext",
        "1.0",
        {"fakeext/__init__.py": b"", "fakeext/_C.so": ext.read_bytes()},
        requires=["torch==2.6.0"],
    )
    return torch_wheel, ext_wheel


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
