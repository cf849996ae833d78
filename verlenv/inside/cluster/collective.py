"""A cross-node all-reduce through Ray: does traffic flow between the nodes, how fast, and over what.

One rank per GPU (Ray actors with num_gpus=1, NCCL) when every node has GPUs, else one rank per
node (gloo on CPU). Rendezvous is at rank 0's Ray node address, as verl's worker groups do
(MASTER_ADDR = the node IP Ray reports); the backends then pick their own interfaces as they would
in training (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), so a node whose pick is unreachable fails
here. With NCCL, NCCL_DEBUG=INFO goes to a file per rank, and the transport it chose ("Using
network IB|Socket", the "via NET/IB", "via P2P" channel lines) is read back.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from verlenv.inside.cluster.compare import Cell, ClusterCheck
from verlenv.inside.cluster.gather import Node, NodeAnswer, pinned
from verlenv.inside.doctor.model import Status

NETWORK = re.compile(r"Using network (.+?)\s*$")
VIA = re.compile(r"\bvia (\S+)")
SOCKET_IF = re.compile(r"NET/Socket : Using (.+?)\s*$")
BOOTSTRAP = re.compile(r"Bootstrap\s*: Using (\S+)")
LATENCY_BYTES = 4


# -- on each rank -----------------------------------------------------------------------------


def parse_nccl_log(text: str) -> dict[str, Any]:
    """What NCCL_DEBUG=INFO says about the transport: network, channel transports, interfaces."""
    found: dict[str, Any] = {"network": "", "via": [], "socket_ifs": [], "bootstrap": "", "ib_missing": False}
    via: set[str] = set()
    for line in text.splitlines():
        if (m := NETWORK.search(line)) and not found["network"]:
            found["network"] = m.group(1)
        if m := VIA.search(line):
            via.add(m.group(1))
        if (m := SOCKET_IF.search(line)) and m.group(1) not in found["socket_ifs"]:
            found["socket_ifs"].append(m.group(1))
        if (m := BOOTSTRAP.search(line)) and not found["bootstrap"]:
            found["bootstrap"] = m.group(1)
        found["ib_missing"] |= "NET/IB : No device found" in line
    found["via"] = sorted(via)
    return found


def _timed(op: Callable[[], None], reps: int, sync: Callable[[], None]) -> float:
    """Seconds per call of ``op``, after two warm-up calls."""
    for _ in range(2):
        op()
    sync()
    started = time.perf_counter()
    for _ in range(reps):
        op()
    sync()
    return (time.perf_counter() - started) / reps


def _measure(
    dist: ModuleType, torch: ModuleType, device: str, rank: int, world: int, spec: Mapping[str, Any]
) -> dict[str, Any]:
    check = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(check)
    expected = world * (world + 1) / 2
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    big = torch.ones(int(spec["size_mib"] * 2**20) // 4, device=device)
    small = torch.ones(1, device=device)
    dist.barrier()
    per_big = _timed(lambda: dist.all_reduce(big), spec["reps"], sync)
    per_small = _timed(lambda: dist.all_reduce(small), spec["reps"] * 2, sync)
    algbw = big.numel() * 4 / per_big / 1e9
    return {
        "sum": [float(v) for v in check.cpu().tolist()],
        "expected": expected,
        "sum_ok": bool((check == expected).all()),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world - 1) / world if world > 1 else algbw,
        "latency_us": per_small * 1e6,
    }


def run_rank(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One rank: init, check the sum, time a big and a tiny all-reduce, read NCCL's log."""
    import datetime

    import torch
    import torch.distributed as dist

    backend, rank, world = spec["backend"], spec["rank"], spec["world"]
    log_dir = tempfile.mkdtemp(prefix="verlenv-nccl-")
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # never NVLink multicast: it can take a shared host's GPUs down
    if backend == "nccl":
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=f"{log_dir}/nccl.%p.log")
        torch.cuda.set_device(0)  # Ray gave this actor one GPU, visible as device 0
    host = f"[{spec['master']}]" if ":" in spec["master"] else spec["master"]
    started = time.monotonic()
    result: dict[str, Any] = {"rank": rank, "node": spec["node"]}
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://{host}:{spec['port']}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=spec["timeout"]),
        )
        try:
            result.update(_measure(dist, torch, "cuda" if backend == "nccl" else "cpu", rank, world, spec))
        finally:
            dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - a failed rank is the finding
        result["error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    logs = "".join(p.read_text(errors="replace") for p in sorted(Path(log_dir).glob("nccl.*.log")))
    shutil.rmtree(log_dir, ignore_errors=True)
    result["nccl"] = parse_nccl_log(logs) if backend == "nccl" else {}
    result["seconds"] = time.monotonic() - started
    return result


class RankWorker:
    """A Ray actor that holds one rank: it picks the rendezvous port (rank 0) and runs the smoke."""

    def free_port(self, host: str) -> int:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])

    def run(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return run_rank(spec)


# -- the driver -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveResult:
    backend: str
    world_size: int
    master: str  # host:port of the rendezvous
    size_mib: float
    reps: int
    ranks: tuple[Mapping[str, Any], ...] = ()  # each rank's answer (run_rank's dict)
    error: str = ""  # the smoke as a whole could not run (placement, deadline)
    missing: tuple[str, ...] = ()  # node labels with a rank that did not answer in time
    seconds: float = 0.0
    nodes: tuple[str, ...] = field(default_factory=tuple)  # labels of the nodes in the smoke

    @property
    def failed(self) -> list[Mapping[str, Any]]:
        return [r for r in self.ranks if r.get("error") or not r.get("sum_ok")]

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "world_size": self.world_size,
            "master": self.master,
            "size_mib": self.size_mib,
            "reps": self.reps,
            "ranks": [dict(r) for r in self.ranks],
            "error": self.error,
            "missing": list(self.missing),
            "seconds": round(self.seconds, 3),
            "nodes": list(self.nodes),
        }


def plan(nodes: Sequence[Node]) -> tuple[str, list[Node]]:
    """(backend, the node of each rank): NCCL with a rank per GPU when every node has GPUs, else gloo."""
    if nodes and all(n.gpus > 0 for n in nodes):
        return "nccl", [n for n in nodes for _ in range(n.gpus)]
    return "gloo", list(nodes)


def run(ray: ModuleType, nodes: Sequence[Node], timeout: float, size_mib: float, reps: int) -> CollectiveResult:
    backend, placement = plan(nodes)
    started = time.monotonic()
    base = CollectiveResult(backend, len(placement), "", size_mib, reps, nodes=tuple(n.label for n in nodes))
    if not placement:
        return replace(base, error="no node to run on", seconds=0.0)
    worker = ray.remote(RankWorker)
    gpus = 1 if backend == "nccl" else 0
    actors = [worker.options(num_gpus=gpus, num_cpus=0, scheduling_strategy=pinned(n)).remote() for n in placement]
    try:
        return _drive(ray, base, actors, placement, started + timeout)
    finally:
        for actor in actors:
            with suppress(Exception):
                ray.kill(actor, no_restart=True)


def _drive(
    ray: ModuleType, base: CollectiveResult, actors: list[Any], placement: list[Node], deadline: float
) -> CollectiveResult:
    started = time.monotonic()
    master = placement[0].ip
    ready, _ = ray.wait([actors[0].free_port.remote(master)], timeout=max(deadline - time.monotonic(), 0.1))
    if not ready:
        return replace(
            base, error=f"rank 0 could not start on {placement[0].label} in time", missing=(placement[0].label,)
        )
    port = ray.get(ready[0])
    spec = {
        "backend": base.backend,
        "master": master,
        "port": port,
        "world": len(actors),
        "size_mib": base.size_mib,
        "reps": base.reps,
        "timeout": max(deadline - time.monotonic() - 5.0, 5.0),
    }
    refs = {a.run.remote({**spec, "rank": i, "node": placement[i].label}): i for i, a in enumerate(actors)}
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=max(deadline - time.monotonic(), 0.1))
    answers = []
    for ref in done:
        try:
            answers.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - a rank whose actor died is a finding
            i = refs[ref]
            answers.append({"rank": i, "node": placement[i].label, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    missing = tuple(sorted({placement[refs[ref]].label for ref in pending}))
    return replace(
        base,
        master=f"{master}:{port}",
        ranks=tuple(sorted(answers, key=lambda r: r["rank"])),
        missing=missing,
        error=f"no answer within the deadline from the ranks on {', '.join(missing)}" if missing else "",
        seconds=time.monotonic() - started,
    )


# -- the verdict ------------------------------------------------------------------------------


def as_check(result: CollectiveResult, answers: Sequence[NodeAnswer], rows: Sequence[ClusterCheck]) -> ClusterCheck:
    title = f"Cross-node all-reduce ({result.backend})"
    cells = _cells(result)
    culprits = tuple(sorted({*result.missing, *(str(r["node"]) for r in result.failed)}))
    if result.error or result.failed:
        said = [result.error] if result.error else []
        said += [
            f"rank {r['rank']} on {r['node']}: {r.get('error') or 'wrong sum ' + str(r.get('sum'))}"
            for r in result.failed
        ]
        said += _likely_causes(result.backend, rows)
        return ClusterCheck(
            "collective",
            title,
            Status.FAIL,
            "; ".join(said),
            cells,
            culprits,
            fix="fix the address rows first; then `verlenv doctor --cluster --collective` again",
        )
    summary = _numbers(result)
    ib_nodes = [a.node.label for a in answers if a.facts and a.facts.rdma.uverbs]
    network = _network(result)
    if result.backend == "nccl" and ib_nodes and network.lower().startswith("socket"):
        return ClusterCheck(
            "collective",
            title,
            Status.WARN,
            f"{summary}; NCCL used sockets although there are RDMA devices on {', '.join(ib_nodes)}",
            cells,
            tuple(ib_nodes),
            fix="see the rdma row: NCCL needs libibverbs and its providers",
        )
    return ClusterCheck("collective", title, Status.OK, summary, cells)


def _network(result: CollectiveResult) -> str:
    return next((r["nccl"]["network"] for r in result.ranks if r.get("nccl", {}).get("network")), "")


def _numbers(result: CollectiveResult) -> str:
    rank0 = result.ranks[0]
    text = (
        f"{result.world_size} rank(s) on {len(result.nodes)} node(s), sum ok; "
        f"{rank0['algbw_gbps']:.3f} GB/s ({rank0['busbw_gbps']:.3f} GB/s bus) for {result.size_mib:g} MiB "
        f"x {result.reps}; latency {rank0['latency_us']:.0f} us ({LATENCY_BYTES} bytes)"
    )
    if result.backend == "nccl":
        via = sorted({v for r in result.ranks for v in r.get("nccl", {}).get("via", [])})
        text += f"; NCCL network {_network(result) or '?'}, via {', '.join(via) or 'no channels (one rank)'}"
    return text


def _cells(result: CollectiveResult) -> dict[str, Cell]:
    cells: dict[str, Cell] = {}
    for label in result.nodes:
        mine = [r for r in result.ranks if r["node"] == label]
        bad = [r for r in mine if r.get("error") or not r.get("sum_ok")]
        if label in result.missing or bad or not mine:
            cells[label] = Cell(Status.FAIL, "no answer" if label in result.missing or not mine else "error")
            continue
        via = sorted({"/".join(v.split("/")[:2]) for r in mine for v in r.get("nccl", {}).get("via", [])})
        cells[label] = Cell(Status.OK, f"{len(mine)} rank(s) ok" + (f", {' '.join(via)}" if via else ""))
    return cells


def _likely_causes(backend: str, rows: Sequence[ClusterCheck]) -> list[str]:
    wanted = {"gloo": ("gloo-address", "ray-address"), "nccl": ("nccl-address", "ray-address", "rdma")}[backend]
    return [
        f"likely cause, from the {r.id} row: {r.summary}"
        for r in rows
        if r.id in wanted and r.status in (Status.FAIL, Status.WARN) and r.culprits
    ]
