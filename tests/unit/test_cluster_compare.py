"""Cross-node verdicts from the nodes' doctor JSON: each fault names the node at fault; output validates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from tests.helpers.clusterfacts import WITH_RDMA, answer, check
from verlenv.inside.cluster import compare, render
from verlenv.inside.cluster.gather import Node, NodeAnswer
from verlenv.inside.cluster.netsel import Address
from verlenv.inside.cluster.session import ClusterReport

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "verlenv/schemas/doctor-cluster-1.schema.json").read_text())


def _rows(answers: list[NodeAnswer]) -> dict[str, compare.ClusterCheck]:
    return {row.id: row for row in compare.compare(answers)}


def _two(**node2: Any) -> list[NodeAnswer]:
    return [answer("10.0.0.1", "n1", head=True), answer("10.0.0.2", "n2", **node2)]


def test_a_healthy_pair_passes_every_row() -> None:
    rows = _rows(_two())
    assert {r.id: r.status.value for r in rows.values()} == {
        "answered": "ok",
        "same-image": "ok",
        "same-python": "ok",
        "same-torch": "ok",
        "same-verl": "ok",
        "same-ray": "ok",
        "ray-address": "ok",
        "nccl-address": "ok",
        "gloo-address": "ok",
        "rdma": "skip",  # the fake nodes ran no rdma check
        "shm": "ok",
        "nccl": "skip",
        "doctor": "ok",
    }  # vllm and the driver: no node has them, so no rows
    assert rows["gloo-address"].summary == "every node picks an address in 10.0.0.0/24"


def test_another_verl_fails_and_names_the_node_that_differs_from_the_head_on_a_tie() -> None:
    rows = _rows(_two(verl="0.9.2", manifest="b" * 64))
    assert rows["same-verl"].status.value == "fail" and rows["same-verl"].culprits == ("10.0.0.2 (n2)",)
    assert rows["same-verl"].summary == "10.0.0.2 (n2) has 0.9.2; the other nodes have verl 0.9.1"
    assert rows["same-image"].culprits == ("10.0.0.2 (n2)",) and "manifest bbbbbbbbbbbb" in rows["same-image"].summary


def test_the_majority_is_the_reference_when_there_is_one() -> None:
    answers = [answer("10.0.0.1", "n1", head=True, verl="0.9.2"), answer("10.0.0.2", "n2"), answer("10.0.0.3", "n3")]
    assert _rows(answers)["same-verl"].culprits == ("10.0.0.1 (n1)",)


def test_the_image_id_counts_when_every_node_knows_it() -> None:
    rows = _rows(_two(image_id="sha256:" + "2" * 64))
    assert rows["same-image"].status.value == "fail" and "image 222222222222" in rows["same-image"].summary
    assert _rows(_two(image_id=""))["same-image"].status.value == "ok"  # one node does not know: manifests decide


def test_a_different_driver_major_is_a_warning() -> None:
    answers = [answer("10.0.0.1", "n1", head=True, driver="580"), answer("10.0.0.2", "n2", driver="570")]
    row = _rows(answers)["same-driver"]
    assert row.status.value == "warn" and row.culprits == ("10.0.0.2 (n2)",)


def test_gloo_and_nccl_on_loopback_fail_on_two_nodes_and_only_warn_on_one() -> None:
    rows = _rows(_two(env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}))
    for row_id in ("gloo-address", "nccl-address"):
        assert rows[row_id].status.value == "fail" and rows[row_id].culprits == ("10.0.0.2 (n2)",)
    assert "GLOO_SOCKET_IFNAME=lo -> lo 127.0.0.1 (loopback)" in rows["gloo-address"].summary
    alone = _rows([answer("10.0.0.1", "n1", head=True, env={"GLOO_SOCKET_IFNAME": "lo"})])
    assert alone["gloo-address"].status.value == "warn"


def test_a_hostname_that_does_not_resolve_sends_gloo_to_loopback() -> None:
    row = _rows(_two(resolved=()))["gloo-address"]
    assert row.status.value == "fail" and "does not resolve to an address of this node" in row.summary


def test_docker_bridge_link_local_and_another_subnet() -> None:
    bridge = (Address("lo", "127.0.0.1", 8), Address("docker0", "172.17.0.1", 16))
    row = _rows(_two(addresses=bridge))["nccl-address"]
    assert row.status.value == "fail" and "(docker bridge)" in row.summary and row.culprits == ("10.0.0.2 (n2)",)
    link_local = (Address("lo", "127.0.0.1", 8), Address("eth0", "169.254.9.9", 16))
    assert "(link-local)" in _rows(_two(addresses=link_local))["nccl-address"].summary
    answers = [
        answer("10.0.0.1", "n1", head=True),
        answer("10.0.0.2", "n2"),
        answer("10.0.1.3", "n3", addresses=(Address("eth0", "10.0.1.3", 24),)),
    ]
    row = _rows(answers)["ray-address"]
    assert row.status.value == "warn" and row.culprits == ("10.0.1.3 (n3)",)
    assert "is in 10.0.1.0/24, the other nodes in 10.0.0.0/24" in row.summary


def test_nccl_socket_ifname_matching_nothing_fails_and_a_ray_address_held_elsewhere_warns() -> None:
    row = _rows(_two(env={"NCCL_SOCKET_IFNAME": "=ens5"}))["nccl-address"]
    assert row.status.value == "fail" and "matches no interface here" in row.summary
    natted = (Address("lo", "127.0.0.1", 8), Address("eth0", "192.168.1.2", 24))
    row = _rows(_two(addresses=natted, resolved=("192.168.1.2",)))["ray-address"]
    assert row.status.value == "warn" and "10.0.0.2 is not an address of this node" in row.summary


def test_shm_nccl_and_the_rest_of_doctor_come_from_each_node() -> None:
    small = check("shm", "fail", "/dev/shm is 64 MiB: NCCL and Ray need more", "docker run --ipc=host")
    drift = check("manifest-drift", "fail", "2 changed since the build")
    rows = _rows(_two(checks=(small, drift)))
    assert rows["shm"].culprits == ("10.0.0.2 (n2)",) and rows["shm"].fix == "docker run --ipc=host"
    assert rows["shm"].summary == "10.0.0.2 (n2): /dev/shm is 64 MiB: NCCL and Ray need more"
    assert rows["shm"].cells["10.0.0.1 (n1)"].text == "/dev/shm is 2048 MiB"
    assert rows["doctor"].status.value == "fail" and rows["doctor"].cells["10.0.0.2 (n2)"].text == "manifest-drift"


def test_rdma_the_same_everywhere_is_said_once_and_on_some_nodes_only_fails() -> None:
    warn = check("rdma", "warn", "no RDMA device is visible", "install")
    both = [answer("10.0.0.1", "n1", head=True, checks=(warn,)), answer("10.0.0.2", "n2", checks=(warn,))]
    row = _rows(both)["rdma"]
    assert row.status.value == "warn" and row.summary == "every node: no RDMA device is visible"
    assert row.cells["10.0.0.1 (n1)"].text == "no RDMA devices, no libibverbs"
    mixed = [answer("10.0.0.1", "n1", head=True, rdma=WITH_RDMA, checks=(check("rdma"),)), both[1]]
    row = _rows(mixed)["rdma"]
    assert row.status.value == "fail" and row.culprits == ("10.0.0.2 (n2)",)
    assert row.cells["10.0.0.1 (n1)"].text == "mlx5_0, libibverbs + 1 providers"


def test_nodes_that_did_not_answer_are_named_and_the_others_still_compared() -> None:
    lost = NodeAnswer(Node("id-n3", "10.0.0.3", "n3"), "no-answer", 30.0, error="no answer within 30 s")
    died = NodeAnswer(Node("id-n4", "10.0.0.4", "n4"), "died", 3.0, error="NodeDiedError: the node is dead")
    rows = _rows([*_two(), lost, died])
    assert rows["answered"].culprits == ("10.0.0.3 (n3)", "10.0.0.4 (n4)")
    assert "10.0.0.3 (n3): stopped answering: no answer within 30 s" in rows["answered"].summary
    assert "10.0.0.4 (n4): died during the check (NodeDiedError" in rows["answered"].summary
    assert rows["same-verl"].status.value == "ok" and "10.0.0.3 (n3)" not in rows["same-verl"].cells
    assert compare.compare([lost])[0].status.value == "fail" and len(compare.compare([lost])) == 1


def test_json_validates_and_the_table_has_a_column_per_node() -> None:
    answers = _two(verl="0.9.2")
    checks = tuple(compare.compare(answers))
    report = ClusterReport("auto", tuple(answers), (Node("gone", "10.0.0.9", "n9"),), checks, None, 3.0)
    payload = render.to_json(report, report.exit_code(strict=False))
    jsonschema.validate(payload, SCHEMA)
    assert payload["exit_code"] == 1 and payload["summary"]["fail"] == 1  # same-verl
    assert payload["nodes"][1]["picks"]["gloo"]["address"] == "10.0.0.2"
    text = render.to_table(report)
    assert "10.0.0.1 (n1) *" in text and "10.0.0.2 (n2)" in text and "!! 0.9.2" in text
    assert "[FAIL] same-verl: 10.0.0.2 (n2) has 0.9.2; the other nodes have verl 0.9.1" in text
    assert "listed as dead before the check: 10.0.0.9 (n9)" in text
    assert ClusterReport("auto", (), (), (), None, 0.0).exit_code(strict=True) == 0
