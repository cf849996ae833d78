"""What one node reports about itself for the cross-node comparison (`verlenv doctor --json --node-facts`).

Raw inputs, not verdicts: the versions that must agree across nodes, the image it runs, its
addresses and the environment that steers NCCL and Gloo, the RDMA userspace and the libnccl the
import probe saw. The comparison (compare.py) runs where the results are gathered.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from verlenv.inside.cluster import nccllib, netsel, rdma
from verlenv.inside.doctor.checks_runtime import driver_version
from verlenv.inside.doctor.model import Facts

IMAGE_ID_ENV = "VERLENV_IMAGE_ID"
# what must be the same on every node: (key, distribution)
DISTRIBUTIONS = (("torch", "torch"), ("vllm", "vllm"), ("sglang", "sglang"), ("verl", "verl"), ("ray", "ray"))


@dataclass(frozen=True)
class NodeFacts:
    hostname: str
    versions: dict[str, str]  # python, torch, vllm, sglang, verl, ray, nccl, driver ("" when absent)
    manifest_sha256: str  # of $VERLENV_MANIFEST / /opt/verlenv/manifest.json, "" without one
    image_id: str  # $VERLENV_IMAGE_ID when whoever started the node set it
    addresses: tuple[netsel.Address, ...]
    env: dict[str, str]  # the NCCL_*/GLOO_* variables that steer interface selection
    resolved: tuple[str, ...]  # the hostname's addresses that bind here (Gloo's default)
    rdma: rdma.RdmaFacts
    nccl: nccllib.NcclLibrary
    gpus: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def picks(self, node_ip: str) -> dict[str, netsel.Pick]:
        return netsel.picks(self.addresses, self.env, self.hostname, self.resolved, node_ip)

    def to_json(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "versions": self.versions,
            "manifest_sha256": self.manifest_sha256,
            "image_id": self.image_id,
            "addresses": [asdict(a) for a in self.addresses],
            "env": self.env,
            "resolved": list(self.resolved),
            "rdma": self.rdma.to_json(),
            "nccl": self.nccl.to_json(),
            "gpus": self.gpus,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeFacts:
        return cls(
            hostname=data["hostname"],
            versions=dict(data["versions"]),
            manifest_sha256=data["manifest_sha256"],
            image_id=data["image_id"],
            addresses=tuple(netsel.Address(**a) for a in data["addresses"]),
            env=dict(data["env"]),
            resolved=tuple(data["resolved"]),
            rdma=rdma.RdmaFacts.from_json(data["rdma"]),
            nccl=nccllib.NcclLibrary.from_json(data["nccl"]),
            gpus=int(data.get("gpus", 0)),
            extra=dict(data.get("extra", {})),
        )


def _versions(facts: Facts, torch: Mapping[str, Any]) -> dict[str, str]:
    found = {"python": platform.python_version()}
    found.update({key: facts.dists.get(dist, "") for key, dist in DISTRIBUTIONS})
    found["nccl"] = str(torch.get("nccl") or "")
    driver = driver_version() or str(torch.get("nvml_driver") or "")
    found["driver"] = driver.split(".")[0] if driver else ""  # the major is what must agree
    return found


def _sha256(facts: Facts) -> str:
    path = facts.manifest_file
    return hashlib.sha256(path.read_bytes()).hexdigest() if path else ""


def collect(facts: Facts) -> NodeFacts:
    """This node's facts; the import probe (shared with doctor's checks) supplies torch's side."""
    probe = facts.probe
    torch = probe.get("torch") if isinstance(probe.get("torch"), dict) else {}
    hostname = socket.gethostname()
    return NodeFacts(
        hostname=hostname,
        versions=_versions(facts, torch or {}),
        manifest_sha256=_sha256(facts),
        image_id=os.environ.get(IMAGE_ID_ENV, ""),
        addresses=netsel.read_addresses(),
        env={k: os.environ[k] for k in netsel.NETWORK_ENV if k in os.environ},
        resolved=netsel.resolve_hostname(hostname),
        rdma=rdma.collect(facts.root),
        nccl=nccllib.from_probe(probe, facts.installed),
        gpus=len((torch or {}).get("devices") or []),
    )
