"""RDMA readiness: can NCCL use InfiniBand/RoCE/EFA here, or will it quietly fall back to sockets?

NCCL dlopens libibverbs.so.1 at run time; without it (or without a provider for the HCA) it logs
"NET/IB : No device found" at INFO level and uses TCP sockets, which runs, slowly, and tells no one
(sgl-project/sglang#1427, #3619; NVIDIA-NeMo/RL#2359). Registering memory also needs an unlimited
memlock ulimit or CAP_IPC_LOCK. EFA goes through libfabric and the aws-ofi-nccl net plugin.
"""

from __future__ import annotations

import os
import platform
import resource
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verlenv.inside.doctor.model import Result, Status

PACKAGES = "libibverbs1 ibverbs-providers librdmacm1"
CAP_IPC_LOCK = 14
UNLIMITED = -1


@dataclass(frozen=True)
class RdmaFacts:
    devices: tuple[str, ...]  # /dev/infiniband entries: uverbs0, rdma_cm, umad0
    hcas: tuple[str, ...]  # /sys/class/infiniband: "mlx5_0 (mlx5_core)", "efa_0 (efa)"
    libibverbs: str  # the path found, or ""
    providers: tuple[str, ...]  # libibverbs provider objects and /etc/libibverbs.d drivers
    librdmacm: str
    libfabric: str
    net_plugins: tuple[str, ...]  # libnccl-net*.so found on the library path
    memlock: int  # RLIMIT_MEMLOCK soft limit in bytes, -1 when unlimited
    cap_ipc_lock: bool
    env: dict[str, str] = field(default_factory=dict)  # NCCL_IB_DISABLE, NCCL_NET, NCCL_NET_PLUGIN when set

    @property
    def uverbs(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("uverbs"))

    @property
    def efa(self) -> bool:
        return any(h.startswith("efa") or "(efa)" in h for h in self.hcas)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RdmaFacts:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


# -- reading a machine ------------------------------------------------------------------------


def library_dirs(root: Path, env: Mapping[str, str]) -> list[Path]:
    """Where the dynamic loader looks: LD_LIBRARY_PATH, /etc/ld.so.conf(.d), the default directories."""
    triplet = f"{platform.machine()}-linux-gnu"
    dirs = [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [root / d.lstrip("/") for d in _ld_so_conf(root / "etc/ld.so.conf", root)]
    dirs += [root / d for d in (f"lib/{triplet}", f"usr/lib/{triplet}", "lib64", "usr/lib64", "lib", "usr/lib")]
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _ld_so_conf(path: Path, root: Path, depth: int = 0) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in (raw.split("#")[0].strip() for raw in lines):
        if line.startswith("include ") and depth < 4:
            pattern = line.split(None, 1)[1]
            for included in sorted(root.glob(pattern.lstrip("/"))):
                found += _ld_so_conf(included, root, depth + 1)
        elif line:
            found.append(line)
    return found


def find_library(name: str, dirs: list[Path]) -> str:
    for folder in dirs:
        candidate = folder / name
        if candidate.exists():
            return str(candidate)
    return ""


def _providers(root: Path, libibverbs: str) -> tuple[str, ...]:
    found = []
    if libibverbs:
        found += sorted(p.name for p in (Path(libibverbs).parent / "libibverbs").glob("*.so"))
    found += sorted(p.name for p in (root / "etc/libibverbs.d").glob("*.driver"))
    return tuple(found)


def _hcas(root: Path) -> tuple[str, ...]:
    found = []
    for hca in sorted((root / "sys/class/infiniband").glob("*")):
        driver = hca / "device" / "driver"
        found.append(f"{hca.name} ({driver.readlink().name})" if driver.is_symlink() else hca.name)
    return tuple(found)


def _net_plugins(dirs: list[Path]) -> tuple[str, ...]:
    found: list[str] = []
    for folder in dirs:
        found += [str(p) for p in sorted(folder.glob("libnccl-net*.so*")) if str(p) not in found]
    return tuple(found)


def _cap_ipc_lock(status: Path) -> bool:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _memlock() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return UNLIMITED if soft == resource.RLIM_INFINITY else int(soft)


def collect(root: Path = Path("/"), env: Mapping[str, str] | None = None) -> RdmaFacts:
    env = os.environ if env is None else env
    dirs = library_dirs(root, env)
    libibverbs = find_library("libibverbs.so.1", dirs)
    dev = root / "dev/infiniband"
    return RdmaFacts(
        devices=tuple(sorted(p.name for p in dev.iterdir())) if dev.is_dir() else (),
        hcas=_hcas(root),
        libibverbs=libibverbs,
        providers=_providers(root, libibverbs),
        librdmacm=find_library("librdmacm.so.1", dirs),
        libfabric=find_library("libfabric.so.1", [*dirs, root / "opt/amazon/efa/lib"]),
        net_plugins=_net_plugins(dirs),
        memlock=_memlock(),
        cap_ipc_lock=_cap_ipc_lock(root / "proc/self/status"),
        env={k: env[k] for k in ("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_NET_PLUGIN") if k in env},
    )


# -- the verdict ------------------------------------------------------------------------------


def _missing_userspace(facts: RdmaFacts) -> list[str]:
    wanted = (
        ("libibverbs.so.1", facts.libibverbs),
        ("a libibverbs provider", bool(facts.providers)),
        ("librdmacm.so.1", facts.librdmacm),
    )
    return [name for name, have in wanted if not have]


def _memlock_text(facts: RdmaFacts) -> str:
    return "unlimited" if facts.memlock == UNLIMITED else f"{facts.memlock // 1024} KiB"


def _described(facts: RdmaFacts) -> tuple[str, ...]:
    return (
        f"devices: {', '.join(facts.devices) or 'none'}; HCAs: {', '.join(facts.hcas) or 'none'}",
        f"libibverbs: {facts.libibverbs or 'missing'}; providers: {', '.join(facts.providers) or 'none'}",
        f"librdmacm: {facts.librdmacm or 'missing'}; libfabric: {facts.libfabric or 'missing'}",
        f"NCCL net plugins: {', '.join(facts.net_plugins) or 'none'}",
        f"memlock: {_memlock_text(facts)}; CAP_IPC_LOCK: {'yes' if facts.cap_ipc_lock else 'no'}",
        *(f"{k}={v}" for k, v in facts.env.items()),
    )


def verdict(facts: RdmaFacts) -> Result:
    details = _described(facts)
    missing = _missing_userspace(facts)
    if not facts.uverbs:
        what = "no RDMA device (/dev/infiniband/uverbs*) is visible"
        if missing:
            return Result(
                Status.WARN,
                f"{what} and no RDMA userspace: NCCL can only use sockets between nodes",
                details,
                fix=f"on an InfiniBand/RoCE cluster: install {PACKAGES} in the image and run with "
                "--device=/dev/infiniband --ulimit memlock=-1",
            )
        return Result(
            Status.WARN,
            f"RDMA userspace present, but {what}: NCCL will use sockets between nodes",
            details,
            fix="on an InfiniBand/RoCE/EFA node: run the container with --device=/dev/infiniband",
        )
    return _with_devices(facts, missing, details)


def _with_devices(facts: RdmaFacts, missing: list[str], details: tuple[str, ...]) -> Result:
    hcas = ", ".join(facts.hcas or facts.uverbs)
    if missing:
        return Result(
            Status.FAIL,
            f"RDMA devices ({hcas}) but no {', '.join(missing)}: NCCL silently uses sockets",
            details,
            fix=f"apt-get install {PACKAGES} (in the image)",
        )
    if facts.efa and not (facts.libfabric and facts.net_plugins):
        return Result(
            Status.FAIL,
            f"EFA devices ({hcas}) but no libfabric and aws-ofi-nccl plugin (libnccl-net*.so): NCCL uses sockets",
            details,
            fix="install the EFA software and aws-ofi-nccl; put them on LD_LIBRARY_PATH or NCCL_NET_PLUGIN",
        )
    env = facts.env
    if env.get("NCCL_IB_DISABLE") == "1" or env.get("NCCL_NET", "").lower() == "socket":
        return Result(
            Status.WARN,
            f"RDMA devices ({hcas}) but NCCL is told to use sockets",
            details,
            fix="unset NCCL_IB_DISABLE / NCCL_NET",
        )
    if facts.memlock != UNLIMITED and not facts.cap_ipc_lock:
        return Result(
            Status.WARN,
            f"RDMA devices ({hcas}) but memlock is {_memlock_text(facts)} and no "
            "CAP_IPC_LOCK: NCCL cannot register its buffers",
            details,
            fix="docker run --ulimit memlock=-1 (or --cap-add IPC_LOCK); on Slurm: ulimit -l unlimited",
        )
    return Result(Status.OK, f"RDMA devices ({hcas}), userspace ready, memlock {_memlock_text(facts)}", details)
