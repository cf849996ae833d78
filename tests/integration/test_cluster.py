"""`verlenv doctor --cluster` on real Ray clusters of cpu-smoke containers joined by veths and a bridge.

Two cluster set-ups: a healthy one of three nodes (every cross-node row passes, the gloo all-reduce
runs; then one node frozen and one killed mid-check are named within --timeout), and a two-node one
whose second node carries three faults at once (another image with another verl, Gloo and NCCL
pinned to lo, a 64 MiB /dev/shm), each of which a row of its own must pin on that node.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.helpers.raycluster import NodeSpec, RayCluster, ray_cluster

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "verlenv/schemas/doctor-cluster-1.schema.json").read_text())
CROSS_NODE = ("answered", "same-image", "same-python", "same-torch", "same-verl", "same-ray")
ADDRESSES = ("ray-address", "nccl-address", "gloo-address")
# another verl in another image: the same files, with verl's version edited in its METADATA and the manifest
OTHER_VERL = """FROM {image}
RUN set -e; meta=$(ls /opt/venv/lib/python3*/site-packages/verl-0.9.1.dist-info/METADATA); \\
    sed -i 's/^Version: 0.9.1$/Version: 0.9.2/' $meta; grep -q '^Version: 0.9.2$' $meta; \\
    sed -i 's/"verl": "0.9.1"/"verl": "0.9.2"/g' /opt/verlenv/manifest.json; \\
    grep -q '"verl": "0.9.2"' /opt/verlenv/manifest.json
"""


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    jsonschema.validate(report, SCHEMA)
    return {row["id"]: row for row in report["checks"]}


@pytest.fixture(scope="module")
def other_verl(engine, cpu_smoke) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """An image derived from cpu-smoke that carries verl 0.9.2 (by its metadata and manifest)."""
    dockerfile = io.BytesIO(OTHER_VERL.format(image=cpu_smoke.image_id).encode())
    image, _ = engine.images.build(fileobj=dockerfile, network_mode="none", rm=True, forcerm=True)
    yield image.id
    engine.images.remove(image.id, force=True)


def _doctor_in_background(cluster: RayCluster, *args: str) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.update(zip(("code", "report", "seconds"), cluster.doctor(*args), strict=True))
    )
    thread.start()
    return thread, box


def _lose_nodes_mid_check(cluster: RayCluster, timeout: float) -> dict[str, Any]:
    """Run the cluster doctor; while it runs on them, freeze node 2 (docker pause) and kill node 3's raylet
    and the worker running its check."""
    thread, box = _doctor_in_background(cluster, "--timeout", f"{timeout:g}")
    frozen, killed = cluster.nodes[1], cluster.nodes[2]
    deadline = time.monotonic() + timeout
    while not (frozen.running("--node-facts") and killed.running("--node-facts")) and time.monotonic() < deadline:
        time.sleep(0.05)
    frozen.pause()
    killed.kill_raylet_and_worker_of("--node-facts")
    thread.join(timeout + 60)
    assert not thread.is_alive(), "doctor --cluster hung on a lost node"
    return box


def test_a_healthy_cluster_passes_its_all_reduce_runs_and_lost_nodes_are_named(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    specs = [NodeSpec(f"node{i}", cpu_smoke.image_id) for i in (1, 2, 3)]
    with ray_cluster(engine, specs) as cluster:
        node1, node2, node3 = (n.label for n in cluster.nodes)
        code, report, _ = cluster.doctor("--timeout", "60")
        rows = _rows(report)
        assert code == 0, json.dumps(report["checks"], indent=1)
        assert [n["label"] for n in report["nodes"]] == [node1, node2, node3] and report["nodes"][0]["is_head"]
        for row_id in (*CROSS_NODE, *ADDRESSES, "shm", "doctor"):
            assert rows[row_id]["status"] == "ok", rows[row_id]
        assert rows["gloo-address"]["cells"][node2]["text"] == "eth0 10.213.0.2"
        assert rows["nccl-address"]["summary"] == "every node picks an address in 10.213.0.0/24"
        # the image has the RDMA userspace (bases.toml); the test nodes have no /dev/infiniband
        assert rows["rdma"]["status"] == "warn" and "NCCL will use sockets between nodes" in rows["rdma"]["summary"]
        assert "RDMA userspace present" in rows["rdma"]["summary"]
        assert rows["nccl"]["status"] == "skip"  # a CPU build of torch

        code, report, _ = cluster.doctor("--collective", "--timeout", "60")
        smoke = report["collective"]
        assert code == 0 and _rows(report)["collective"]["status"] == "ok", smoke
        assert smoke["backend"] == "gloo" and smoke["world_size"] == 3 and smoke["master"].startswith("10.213.0.1:")
        assert all(r["sum_ok"] and r["sum"] == [6.0] * 4 for r in smoke["ranks"]), smoke
        assert smoke["ranks"][0]["algbw_gbps"] > 0 and smoke["ranks"][0]["latency_us"] > 0

        # (d) nodes that stop answering mid-check: named, and the command returns in time
        box = _lose_nodes_mid_check(cluster, timeout=25)
        rows = _rows(box["report"])
        assert box["code"] == 1 and box["seconds"] < 25 + 20, box["seconds"]
        assert rows["answered"]["status"] == "fail" and rows["answered"]["culprits"] == [node2, node3]
        assert f"{node2}: stopped answering: no answer within 25 s" in rows["answered"]["summary"]
        assert f"{node3}: died during the check" in rows["answered"]["summary"]
        states = {n["label"]: n["state"] for n in box["report"]["nodes"]}
        assert states == {node1: "answered", node2: "no-answer", node3: "died"}, box["report"]["nodes"]


def test_each_fault_on_one_node_is_pinned_on_that_node(engine, cpu_smoke, other_verl) -> None:  # type: ignore[no-untyped-def]
    faulty = NodeSpec(
        "node2",
        other_verl,  # (a) another image, with verl 0.9.2
        env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"},  # (b)
        shm_size="64m",  # (c)
    )
    with ray_cluster(engine, [NodeSpec("node1", cpu_smoke.image_id), faulty]) as cluster:
        node1, node2 = (n.label for n in cluster.nodes)
        code, table = cluster.doctor_table("--timeout", "60")
        print(table)
        assert code == 1
        code, report, _ = cluster.doctor("--timeout", "60")
        rows = _rows(report)
        assert code == 1
        expected = {"same-image": "fail", "same-verl": "fail", "gloo-address": "fail", "nccl-address": "fail"}
        expected["shm"] = "fail"
        for row_id, status in expected.items():
            assert (rows[row_id]["status"], rows[row_id]["culprits"]) == (status, [node2]), rows[row_id]
            assert rows[row_id]["cells"][node1]["status"] == "ok", rows[row_id]
        assert "has 0.9.2; the other nodes have verl 0.9.1" in rows["same-verl"]["summary"]
        assert rows["gloo-address"]["cells"][node2]["text"] == "lo 127.0.0.1"
        assert "GLOO_SOCKET_IFNAME=lo -> lo 127.0.0.1 (loopback)" in rows["gloo-address"]["summary"]
        assert "NCCL_SOCKET_IFNAME=lo -> lo 127.0.0.1 (loopback)" in rows["nccl-address"]["summary"]
        assert "/dev/shm is 64 MiB" in rows["shm"]["summary"]
        for row_id in ("answered", "same-python", "same-torch", "same-ray", "ray-address"):
            assert rows[row_id]["status"] == "ok", rows[row_id]
