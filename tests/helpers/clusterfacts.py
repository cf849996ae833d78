"""Nodes' answers for the cluster comparison tests, built from real NodeFacts and doctor-shaped check results."""

from __future__ import annotations

from typing import Any

from verlenv.inside.cluster.gather import Node, NodeAnswer
from verlenv.inside.cluster.nccllib import NcclLibrary
from verlenv.inside.cluster.netsel import Address
from verlenv.inside.cluster.nodefacts import NodeFacts
from verlenv.inside.cluster.rdma import RdmaFacts

NO_RDMA = RdmaFacts((), (), "", (), "", "", (), 8 << 20, False)
WITH_RDMA = RdmaFacts(("uverbs0",), ("mlx5_0 (mlx5_core)",), "/usr/lib/libibverbs.so.1", ("libmlx5-rdmav34.so",),
                      "/usr/lib/librdmacm.so.1", "", (), -1, False)  # fmt: skip


def check(check_id: str, status: str = "ok", summary: str = "fine", fix: str = "") -> dict[str, Any]:
    return {"id": check_id, "title": check_id, "status": status, "summary": summary, "details": [], "fix": fix}


def answer(
    ip: str,
    hostname: str,
    *,
    head: bool = False,
    verl: str = "0.9.1",
    driver: str = "",
    manifest: str = "a" * 64,
    image_id: str = "sha256:" + "1" * 64,
    addresses: tuple[Address, ...] | None = None,
    env: dict[str, str] | None = None,
    resolved: tuple[str, ...] | None = None,
    rdma: RdmaFacts = NO_RDMA,
    checks: tuple[dict[str, Any], ...] = (),
) -> NodeAnswer:
    facts = NodeFacts(
        hostname=hostname,
        versions={
            "python": "3.11.2",
            "torch": "2.13.0+cpu",
            "verl": verl,
            "ray": "2.58.0",
            "vllm": "",
            "driver": driver,
        },
        manifest_sha256=manifest,
        image_id=image_id,
        addresses=addresses or (Address("lo", "127.0.0.1", 8), Address("eth0", ip, 24)),
        env=env or {},
        resolved=(ip,) if resolved is None else resolved,
        rdma=rdma,
        nccl=NcclLibrary("", "", (), "", ()),
    )
    base = {"shm": check("shm", summary="/dev/shm is 2048 MiB"), "python": check("python")}
    base |= {c["id"]: c for c in checks}
    doctor = {"checks": list(base.values()), "node": facts.to_json()}
    return NodeAnswer(Node(f"id-{hostname}", ip, hostname, is_head=head), "answered", 2.0, doctor)
