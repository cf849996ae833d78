"""The host's nvcc, for tests that compile real CUDA sources."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def nvcc() -> str:
    for candidate in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda-13.0", "/usr/local/cuda"):
        if candidate and os.access(Path(candidate) / "bin" / "nvcc", os.X_OK):
            return str(Path(candidate) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if not found:
        pytest.skip("no nvcc on this machine (looked in CUDA_HOME, /usr/local/cuda-13.0, /usr/local/cuda, PATH)")
    return found
