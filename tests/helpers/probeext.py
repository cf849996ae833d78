"""A small real torch extension as an sdist made in the test: C++ against torch's headers and libtorch,
two source files, so a build has more than one compile step (and can fail in one of them)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

NAME, VERSION = "verlenv-probe-ext", "0.1"
SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="verlenv-probe-ext",
    version="0.1",
    packages=["verlenv_probe_ext"],
    install_requires=["torch"],
    ext_modules=[CppExtension("verlenv_probe_ext._C", ["csrc/bind.cpp", "csrc/twice.cpp"])],
    cmdclass={"build_ext": BuildExtension},
)
"""
BIND = """
#include <torch/extension.h>
torch::Tensor twice(const torch::Tensor& x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""
TWICE = """
#include <torch/extension.h>
torch::Tensor twice(const torch::Tensor& x) { return x * 2; }
"""
INIT = "import torch  # noqa: F401  (libtorch first)\nfrom verlenv_probe_ext._C import twice\n"


def make_sdist(where: Path, broken: bool = False) -> Path:
    """verlenv_probe_ext-0.1.tar.gz in ``where``; ``broken`` puts a compile error in csrc/twice.cpp."""
    top = "verlenv_probe_ext-0.1"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n",
        "setup.py": SETUP,
        "verlenv_probe_ext/__init__.py": INIT,
        "csrc/bind.cpp": BIND,
        "csrc/twice.cpp": TWICE.replace("x * 2;", "x * 2") if broken else TWICE,
    }
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), 1700000000, 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
