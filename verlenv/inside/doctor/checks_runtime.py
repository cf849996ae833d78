"""Checks of the running machine: driver, GPU architecture, NCCL, /dev/shm, environment."""

from __future__ import annotations

import os
import re
from pathlib import Path

from verlenv.inside.doctor.model import Facts, Result, Status
from verlenv.verify.abi import version_key

MIN_SHM = 1 << 30  # Docker's default is 64 MiB; NCCL and Ray need far more
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
# where a secret-sounding thing lives, not the thing: TIKTOKEN_CACHE_DIR was listed on the H200
LOCATION_NAME = re.compile(r"_(DIR|PATH|HOME)$", re.I)

# (variable, predicate on its value, status, message, fix): field-notes §3 #7, #8 and vLLM docs.
ENV_TRAPS = (
    (
        "NCCL_CUMEM_ENABLE",
        lambda v: v == "1",
        Status.WARN,
        "NCCL_CUMEM_ENABLE=1: weight sync between actor and rollout can hang (verl sets 0 from v0.6.1)",
        "unset it or set NCCL_CUMEM_ENABLE=0",
    ),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        lambda v: "expandable_segments:true" in v.lower().replace(" ", ""),
        Status.WARN,
        "expandable_segments is not compatible with vLLM's sleep-mode memory pool (cumem allocator)",
        "drop expandable_segments:True for rollout workers",
    ),
    (
        "VLLM_USE_V1",
        lambda v: v == "0",
        Status.WARN,
        "VLLM_USE_V1=0: verl >= 0.5 is tested with the V1 engine (VLLM_USE_V1=1)",
        "unset VLLM_USE_V1",
    ),
    (
        "CUDA_VISIBLE_DEVICES",
        lambda v: v.strip() == "",
        Status.WARN,
        "CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible",
        "unset it or list the GPUs",
    ),
    (
        "VLLM_ALLREDUCE_USE_SYMM_MEM",
        lambda v: v == "1",
        Status.WARN,
        "VLLM_ALLREDUCE_USE_SYMM_MEM=1: verl v0.6.1-v0.7.0 set it to 0 for weight sync",
        "set it to 0",
    ),
)


def driver_version() -> str:
    version_file = Path("/proc/driver/nvidia/version")
    if version_file.exists():
        match = re.search(r"Kernel Module\s+([\d.]+)", version_file.read_text(errors="replace"))
        if match:
            return match.group(1)
    return ""


def check_driver(facts: Facts) -> Result:
    torch = facts.probe.get("torch") or {}
    torch = torch if isinstance(torch, dict) else {}
    driver = driver_version() or str(torch.get("nvml_driver") or "")
    supports = _cuda_of(torch.get("driver"))  # the newest CUDA the driver runs, from the driver API
    cuda = torch.get("cuda")
    if not driver and not supports:
        return Result(Status.SKIP, "no NVIDIA driver on this machine", fix="on a GPU node: docker run --gpus all ...")
    wanted = (facts.manifest.components.get("cuda") if facts.manifest else None) or cuda or "?"
    summary = (
        f"driver {driver or '?'} (runs CUDA <= {supports or '?'}), torch built for CUDA {cuda or '-'}, "
        f"the {facts.manifest.kind if facts.manifest else 'environment'} needs CUDA {wanted}"
    )
    if torch.get("cuda_error"):
        err = str(torch["cuda_error"])
        status = Status.FAIL if "too old" in err.lower() else Status.WARN
        return Result(status, summary, (err,), fix="upgrade the driver, or use a profile built for an older CUDA")
    if supports and wanted != "?" and version_key(supports) < version_key(wanted):
        return Result(
            Status.FAIL,
            summary + "; the driver is too old for these wheels",
            fix=f"a driver that runs CUDA {wanted} (or a profile built for CUDA {supports})",
        )
    if not torch.get("cuda_available"):
        return Result(Status.FAIL, summary + "; CUDA is not usable", fix="check the driver and the container runtime")
    return Result(Status.OK, summary)


def _cuda_of(driver_api: object) -> str:
    """libcuda's cuDriverGetVersion (13000) as a CUDA version ('13.0')."""
    return f"{driver_api // 1000}.{driver_api % 1000 // 10}" if isinstance(driver_api, int) and driver_api > 0 else ""


def check_gpu_arch(facts: Facts) -> Result:
    torch = facts.probe.get("torch")
    if not isinstance(torch, dict) or not torch.get("devices"):
        return Result(Status.SKIP, "no GPU visible")
    arch = [str(a) for a in torch.get("arch_list", [])]
    problems, seen = [], []
    for device in torch["devices"]:
        major, minor = device["capability"]
        sm, ptx = f"sm_{major}{minor}", [a for a in arch if a.startswith("compute_")]
        seen.append(f"{device['name']} ({sm})")
        if sm not in arch and not any(int(p.split("_")[1]) <= major * 10 + minor for p in ptx):
            problems.append(f"{device['name']} is {sm}; torch carries kernels for {', '.join(arch)}")
    if problems:
        return Result(
            Status.FAIL,
            problems[0],
            tuple(problems[1:]),
            fix="use a torch built for this GPU architecture (a newer CUDA profile)",
        )
    return Result(Status.OK, f"{', '.join(seen)}: torch has kernels for it")


def check_nccl(facts: Facts) -> Result:
    """NCCL's version, and whether the libnccl loaded is torch's own (the nvidia-nccl wheel's)."""
    from verlenv.inside.cluster import nccllib

    return nccllib.verdict(nccllib.from_probe(facts.probe, facts.installed))


def check_rdma(facts: Facts) -> Result:
    """The RDMA userspace NCCL needs for InfiniBand/RoCE/EFA, or why it will use sockets."""
    from verlenv.inside.cluster import rdma

    return rdma.verdict(rdma.collect(facts.root))


def check_shm(facts: Facts) -> Result:
    shm = facts.root / "dev" / "shm"
    try:
        stat = os.statvfs(shm)
    except OSError:
        return Result(Status.WARN, f"{shm} does not exist", fix="run the container with --ipc=host or --shm-size=16g")
    size = stat.f_frsize * stat.f_blocks
    text = f"/dev/shm is {size / 2**20:.0f} MiB"
    if size < MIN_SHM:
        return Result(
            Status.FAIL,
            f"{text}: NCCL and Ray need more (Docker's default is 64 MiB)",
            fix="docker run --ipc=host ... (or --shm-size=16g)",
        )
    return Result(Status.OK, text)


def check_env(facts: Facts) -> Result:
    hits = [
        (status, message, fix)
        for name, bad, status, message, fix in ENV_TRAPS
        if name in os.environ and bad(os.environ[name])
    ]
    if not hits:
        return Result(Status.OK, "no known-bad settings among NCCL_*, VLLM_*, PYTORCH_CUDA_ALLOC_CONF")
    return Result(Status.WARN, hits[0][1], tuple(h[1] for h in hits[1:]), fix="; ".join(h[2] for h in hits))


def check_secrets(facts: Facts) -> Result:
    names = sorted(n for n in os.environ if SECRET_NAME.search(n) and not LOCATION_NAME.search(n))
    if not names:
        return Result(Status.OK, "no secret-like variables in the environment")
    return Result(
        Status.WARN,
        f"{len(names)} secret-like variable(s) visible to every process: {', '.join(names)}",
        fix="pass secrets as files or through the scheduler's secret store; values are never printed here",
    )
