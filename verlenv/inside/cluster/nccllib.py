"""The libnccl a process actually loads, against the one torch reports and the nvidia-nccl wheel's.

torch's CUDA wheels load libnccl.so.2 from the nvidia-nccl-cu* wheel. An LD_PRELOAD, an
LD_LIBRARY_PATH entry or a second pip-installed NCCL can put another copy first; then torch runs
a NCCL it was not tested with, or two copies sit in one process (verl-project/verl#6621). The
import probe records the libnccl*.so* files mapped in its own process (/proc/self/maps) after
`import torch` and a few NCCL-free calls, and torch.cuda.nccl.version(), which asks the copy
torch calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from verlenv.inside.doctor.model import Result, Status
from verlenv.inside.installed import Installed

WHEEL_PREFIX = "nvidia-nccl-"
NO_TORCH = "torch does not import"


@dataclass(frozen=True)
class NcclLibrary:
    torch_cuda: str  # the CUDA torch was built for; "" for a CPU build or when torch does not import
    version: str  # torch.cuda.nccl.version()
    loaded: tuple[str, ...]  # libnccl*.so* mapped in the probe's process
    wheel: str  # "nvidia-nccl-cu12 2.27.3", or ""
    wheel_files: tuple[str, ...]  # that wheel's libnccl files
    error: str = ""  # torch does not import, or the version call failed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NcclLibrary:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def from_probe(probe: Mapping[str, Any], installed: Mapping[str, Installed]) -> NcclLibrary:
    torch = probe.get("torch")
    wheel, files = _wheel(installed)
    if not isinstance(torch, dict):
        error = f"{NO_TORCH}: {probe.get('torch_error') or probe.get('error') or 'no answer from the probe'}"
        return NcclLibrary("", "", (), wheel, files, error)
    return NcclLibrary(
        torch_cuda=str(torch.get("cuda") or ""),
        version=str(torch.get("nccl") or ""),
        loaded=tuple(torch.get("nccl_maps") or ()),
        wheel=wheel,
        wheel_files=files,
        error=str(torch.get("nccl_error") or ""),
    )


def _wheel(installed: Mapping[str, Installed]) -> tuple[str, tuple[str, ...]]:
    for name in sorted(installed):
        if name.startswith(WHEEL_PREFIX):
            dist = installed[name]
            site = dist.path.parent
            files = sorted(str(site / f) for f in dist.files if f.rsplit("/", 1)[-1].startswith("libnccl.so"))
            return dist.label, tuple(files)
    return "", ()


def _release(text: str) -> tuple[int, ...]:
    try:
        return Version(text).release[:3]
    except InvalidVersion:
        return ()


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def verdict(lib: NcclLibrary) -> Result:
    if lib.error.startswith(NO_TORCH):
        return Result(Status.SKIP, NO_TORCH)
    if not lib.torch_cuda:
        return Result(Status.SKIP, "CPU build of torch: no NCCL")
    if not lib.version:
        return Result(Status.WARN, "NCCL version unavailable", (lib.error,) if lib.error else ())
    details = (f"loaded: {', '.join(lib.loaded) or 'no libnccl mapped'}", f"wheel: {lib.wheel or 'none'}")
    if len(lib.loaded) > 1:
        return Result(
            Status.FAIL,
            f"{len(lib.loaded)} copies of libnccl in one process: {', '.join(lib.loaded)}",
            details,
            fix="leave one: drop the other directory from LD_LIBRARY_PATH / LD_PRELOAD, or uninstall the extra NCCL",
        )
    wheel_version = lib.wheel.rsplit(" ", 1)[-1] if lib.wheel else ""
    where = lib.loaded[0] if lib.loaded else "a library torch links"
    if wheel_version and _release(wheel_version) != _release(lib.version):
        return Result(
            Status.FAIL,
            f"torch runs NCCL {lib.version} from {where}, but {lib.wheel} is installed",
            details,
            fix="another libnccl comes first: remove it from LD_LIBRARY_PATH / LD_PRELOAD so torch loads its own",
        )
    if lib.wheel_files and lib.loaded and not any(_same_file(lib.loaded[0], f) for f in lib.wheel_files):
        return Result(
            Status.WARN,
            f"NCCL {lib.version} is loaded from {where}, not from {lib.wheel}",
            details,
            fix="the same version, but from elsewhere: check LD_LIBRARY_PATH / LD_PRELOAD",
        )
    source = f" from {lib.wheel}" if lib.wheel else ""
    return Result(Status.OK, f"NCCL {lib.version}{source}", details)
