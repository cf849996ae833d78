"""What one node reports: RDMA readiness (from a machine tree made here), the libnccl loaded, node facts."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from verlenv.inside.cluster import nccllib, rdma
from verlenv.inside.cluster.nccllib import NcclLibrary
from verlenv.inside.cluster.nodefacts import NodeFacts
from verlenv.inside.doctor.model import Status
from verlenv.inside.installed import Installed

REPO = Path(__file__).resolve().parents[2]
DOCTOR_SCHEMA = json.loads((REPO / "verlenv/schemas/doctor-1.schema.json").read_text())
TRIPLET = "x86_64-linux-gnu"


def _touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _machine(root: Path, *, devices: bool, userspace: bool, efa: bool = False, cap: bool = False) -> Path:
    if devices:
        for name in ("uverbs0", "rdma_cm"):
            _touch(root / "dev/infiniband" / name)
        hca = root / "sys/class/infiniband" / ("efa_0" if efa else "mlx5_0") / "device"
        hca.mkdir(parents=True)
        (hca / "driver").symlink_to(f"../../../bus/pci/drivers/{'efa' if efa else 'mlx5_core'}")
    if userspace:
        lib = root / "usr/lib" / TRIPLET
        _touch(lib / "libibverbs.so.1")
        _touch(lib / "librdmacm.so.1")
        _touch(lib / "libibverbs" / ("libefa-rdmav34.so" if efa else "libmlx5-rdmav34.so"))
        _touch(root / "etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
    if efa:  # the EFA installer's own folder, reached through ld.so.conf.d
        _touch(root / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
        _touch(root / "etc/ld.so.conf.d/efa.conf", "/opt/amazon/efa/lib\n/opt/amazon/ofi-nccl/lib\n")
        _touch(root / "opt/amazon/efa/lib/libfabric.so.1")
        _touch(root / "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so")
    capeff = f"{1 << rdma.CAP_IPC_LOCK if cap else 0:016x}"
    _touch(root / "proc/self/status", f"Name:\tpython\nCapEff:\t{capeff}\n")
    return root


def test_rdma_facts_are_read_from_the_machine_tree(tmp_path: Path) -> None:
    facts = rdma.collect(_machine(tmp_path, devices=True, userspace=True, cap=True), env={"NCCL_IB_DISABLE": "0"})
    assert facts.devices == ("rdma_cm", "uverbs0") and facts.uverbs == ("uverbs0",)
    assert facts.hcas == ("mlx5_0 (mlx5_core)",) and not facts.efa
    assert facts.libibverbs == str(tmp_path / "usr/lib" / TRIPLET / "libibverbs.so.1")
    assert facts.providers == ("libmlx5-rdmav34.so", "mlx5.driver") and facts.librdmacm
    assert facts.cap_ipc_lock and facts.env == {"NCCL_IB_DISABLE": "0"}
    assert rdma.RdmaFacts.from_json(json.loads(json.dumps(facts.to_json()))) == facts


def test_no_devices_and_no_userspace_warns_that_nccl_can_only_use_sockets(tmp_path: Path) -> None:
    result = rdma.verdict(rdma.collect(_machine(tmp_path, devices=False, userspace=False), env={}))
    assert result.status == Status.WARN and "NCCL can only use sockets between nodes" in result.summary
    ready = rdma.verdict(rdma.collect(_machine(tmp_path / "b", devices=False, userspace=True), env={}))
    assert ready.status == Status.WARN and ready.summary.startswith("RDMA userspace present")


def test_devices_without_userspace_fail_and_name_the_packages(tmp_path: Path) -> None:
    result = rdma.verdict(rdma.collect(_machine(tmp_path, devices=True, userspace=False), env={}))
    assert result.status == Status.FAIL
    assert "no libibverbs.so.1, a libibverbs provider, librdmacm.so.1" in result.summary
    assert result.fix == "apt-get install libibverbs1 ibverbs-providers librdmacm1 (in the image)"


def test_memlock_ib_disable_and_efa(tmp_path: Path) -> None:
    ready = rdma.collect(_machine(tmp_path, devices=True, userspace=True), env={})
    assert rdma.verdict(replace(ready, memlock=-1)).status == Status.OK
    limited = rdma.verdict(replace(ready, memlock=64 << 10, cap_ipc_lock=False))
    assert limited.status == Status.WARN and "memlock is 64 KiB" in limited.summary and "memlock=-1" in limited.fix
    assert rdma.verdict(replace(ready, memlock=64 << 10, cap_ipc_lock=True)).status == Status.OK
    told = rdma.verdict(replace(ready, memlock=-1, env={"NCCL_IB_DISABLE": "1"}))
    assert told.status == Status.WARN and "told to use sockets" in told.summary
    efa = rdma.collect(_machine(tmp_path / "efa", devices=True, userspace=True, efa=True), env={})
    assert efa.efa and efa.libfabric.endswith("libfabric.so.1") and efa.net_plugins[0].endswith("libnccl-net-ofi.so")
    assert rdma.verdict(replace(efa, memlock=-1)).status == Status.OK
    bare = rdma.verdict(replace(efa, memlock=-1, net_plugins=()))
    assert bare.status == Status.FAIL and "aws-ofi-nccl" in bare.summary


# -- the libnccl loaded ------------------------------------------------------------------------

WHEEL_LIB = "/site/nvidia/nccl/lib/libnccl.so.2"


def _lib(**changes: object) -> NcclLibrary:
    base = NcclLibrary("12.8", "2.26.2", (WHEEL_LIB,), "nvidia-nccl-cu12 2.26.2", (WHEEL_LIB,))
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_wheels_libnccl_passes() -> None:
    result = nccllib.verdict(_lib())
    assert result.status == Status.OK and result.summary == "NCCL 2.26.2 from nvidia-nccl-cu12 2.26.2"


def test_another_libnccl_first_fails_naming_where_it_came_from() -> None:
    result = nccllib.verdict(_lib(version="2.21.5", loaded=("/usr/lib/x86_64-linux-gnu/libnccl.so.2",)))
    assert result.status == Status.FAIL
    assert result.summary == (
        "torch runs NCCL 2.21.5 from /usr/lib/x86_64-linux-gnu/libnccl.so.2, but nvidia-nccl-cu12 2.26.2 is installed"
    )
    two = nccllib.verdict(_lib(loaded=(WHEEL_LIB, "/opt/nccl/lib/libnccl.so.2")))
    assert two.status == Status.FAIL and two.summary.startswith("2 copies of libnccl in one process")
    elsewhere = nccllib.verdict(_lib(loaded=("/opt/nccl/lib/libnccl.so.2",)))
    assert elsewhere.status == Status.WARN and "not from nvidia-nccl-cu12" in elsewhere.summary


def test_cpu_builds_and_broken_torch_skip() -> None:
    assert nccllib.verdict(_lib(torch_cuda="", version="", loaded=())).summary == "CPU build of torch: no NCCL"
    broken = nccllib.from_probe({"torch_error": "ImportError: libcudart.so.12"}, {})
    assert nccllib.verdict(broken).status == Status.SKIP and "libcudart" in broken.error


def test_from_probe_finds_the_wheel_and_its_library(tmp_path: Path) -> None:
    dist = tmp_path / "nvidia_nccl_cu12-2.26.2.dist-info"
    wheel = Installed(
        "nvidia-nccl-cu12",
        "2.26.2",
        (),
        dist,
        frozenset({"nvidia/nccl/lib/libnccl.so.2", "nvidia/nccl/__init__.py"}),
        (),
    )
    loaded = str(tmp_path / "nvidia/nccl/lib/libnccl.so.2")
    probe = {"torch": {"cuda": "12.8", "nccl": "2.26.2", "nccl_maps": [loaded]}}
    lib = nccllib.from_probe(probe, {"nvidia-nccl-cu12": wheel})
    assert lib.wheel_files == (loaded,) and lib.wheel == "nvidia-nccl-cu12 2.26.2"
    assert nccllib.verdict(lib).status == Status.OK


def test_the_probe_lists_the_libnccl_its_process_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A CPU torch loads no NCCL; a stand-in libnccl.so.2 preloaded into the probe must show up in its maps.
    from verlenv.inside.doctor.probe import run_probe

    source = tmp_path / "nccl.c"
    source.write_text("int ncclGetVersion(int *v) { *v = 22602; return 0; }\n")
    library = tmp_path / "libnccl.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    monkeypatch.setenv("LD_PRELOAD", str(library))
    probe = run_probe(120)
    assert probe["torch"]["nccl_maps"] == [str(library)]  # type: ignore[index]


# -- the node's facts, from a real doctor run --------------------------------------------------


def test_doctor_node_facts_here_validate_and_round_trip() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verlenv", "doctor", "--json", "--node-facts", "--skip", "shm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, DOCTOR_SCHEMA)
    facts = NodeFacts.from_json(report["node"])
    assert NodeFacts.from_json(json.loads(json.dumps(facts.to_json()))) == facts
    assert ("lo", "127.0.0.1") in {(a.interface, a.address) for a in facts.addresses}
    assert facts.versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert facts.versions["torch"].startswith("2.")  # the venv's CPU torch
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["rdma"]["status"] in ("ok", "warn") and checks["nccl"]["status"] == "skip"


def test_the_cluster_path_without_ray_or_a_cluster_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verlenv", "doctor", "--cluster"], capture_output=True, text=True, check=False
    )
    # without Ray: the package and its install line; with Ray but no cluster: how to start one
    assert proc.returncode == 2, proc.stderr
    assert "needs Ray (module 'ray')" in proc.stderr or "no Ray cluster to attach to" in proc.stderr, proc.stderr


def test_the_early_probe_is_not_started_for_the_cluster_path() -> None:
    from verlenv.inside.doctor import probe

    probe.start_early(["doctor", "--cluster", "--json"])
    assert not probe._early
