"""The all-reduce smoke: NCCL's log parsed for its transport, rank planning, verdicts, and a real gloo run."""

from __future__ import annotations

import multiprocessing
import socket

from tests.helpers.clusterfacts import WITH_RDMA, answer
from verlenv.inside.cluster import collective
from verlenv.inside.cluster.collective import CollectiveResult
from verlenv.inside.cluster.compare import ClusterCheck
from verlenv.inside.cluster.gather import Node
from verlenv.inside.doctor.model import Status

# lines as NCCL 2.2x writes them with NCCL_DEBUG=INFO (host names and pids shortened)
SOCKET_LOG = """\
n1:101:101 [0] NCCL INFO Bootstrap : Using eth0:10.213.0.1<0>
n1:101:101 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
n1:101:120 [0] NCCL INFO NET/IB : No device found.
n1:101:120 [0] NCCL INFO NET/Socket : Using [0]eth0:10.213.0.1<0>
n1:101:120 [0] NCCL INFO Using network Socket
n1:101:120 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
n1:101:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
n1:101:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[1] via P2P/CUMEM/read
"""
IB_LOG = """\
n1:7:7 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:192.168.7.1<0>
n1:7:7 [0] NCCL INFO Using network IB
n1:7:9 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
"""


def test_nccl_log_says_which_network_and_transports_were_used() -> None:
    found = collective.parse_nccl_log(SOCKET_LOG)
    assert found["network"] == "Socket" and found["ib_missing"]
    assert found["via"] == ["NET/Socket/0", "P2P/CUMEM/read"]
    assert found["socket_ifs"] == ["[0]eth0:10.213.0.1<0>"] and found["bootstrap"] == "eth0:10.213.0.1<0>"
    ib = collective.parse_nccl_log(IB_LOG)
    assert ib["network"] == "IB" and ib["via"] == ["NET/IB/0/GDRDMA"] and not ib["ib_missing"]


def test_ranks_are_one_per_gpu_with_nccl_else_one_per_node_with_gloo() -> None:
    gpu = [Node("a", "10.0.0.1", "n1", True, 2), Node("b", "10.0.0.2", "n2", False, 1)]
    backend, ranks = collective.plan(gpu)
    assert backend == "nccl" and [n.hostname for n in ranks] == ["n1", "n1", "n2"]
    mixed = [gpu[0], Node("c", "10.0.0.3", "n3")]
    assert collective.plan(mixed) == ("gloo", mixed)


def _rank(rank: int, node: str, **extra: object) -> dict[str, object]:
    base = {"rank": rank, "node": node, "sum_ok": True, "sum": [3.0] * 4, "algbw_gbps": 1.5, "busbw_gbps": 1.5}
    return {**base, "latency_us": 80.0, **extra}


def test_verdicts_name_the_failing_ranks_node_and_the_likely_cause() -> None:
    nodes = ("10.0.0.1 (n1)", "10.0.0.2 (n2)")
    ok = CollectiveResult("gloo", 2, "10.0.0.1:29500", 8, 10, (_rank(0, nodes[0]), _rank(1, nodes[1])), nodes=nodes)
    row = collective.as_check(ok, [], [])
    assert row.status == Status.OK and row.summary.startswith("2 rank(s) on 2 node(s), sum ok; 1.500 GB/s")
    broken = CollectiveResult(
        "gloo", 2, "10.0.0.1:29500", 8, 10,
        (_rank(0, nodes[0], error="RuntimeError: Connection refused"), _rank(1, nodes[1])),
        nodes=nodes,
    )  # fmt: skip
    cause = ClusterCheck("gloo-address", "Gloo", Status.FAIL, "10.0.0.1 (n1): lo", culprits=(nodes[0],))
    row = collective.as_check(broken, [], [cause])
    assert row.status == Status.FAIL and row.culprits == (nodes[0],)
    assert "rank 0 on 10.0.0.1 (n1): RuntimeError: Connection refused" in row.summary
    assert "likely cause, from the gloo-address row: 10.0.0.1 (n1): lo" in row.summary
    late = CollectiveResult("gloo", 2, "", 8, 10, error="no answer within the deadline", missing=(nodes[1],),
                            nodes=nodes)  # fmt: skip
    row = collective.as_check(late, [], [])
    assert row.status == Status.FAIL and row.cells[nodes[1]].text == "no answer"


def test_nccl_over_sockets_on_rdma_nodes_is_a_warning() -> None:
    label = "10.0.0.1 (n1)"
    socket_rank = _rank(0, label, nccl=collective.parse_nccl_log(SOCKET_LOG))
    result = CollectiveResult("nccl", 1, "10.0.0.1:29500", 8, 10, (socket_rank,), nodes=(label,))
    plain = collective.as_check(result, [answer("10.0.0.1", "n1")], [])
    assert plain.status == Status.OK and "NCCL network Socket, via NET/Socket/0, P2P/CUMEM/read" in plain.summary
    rdma_node = answer("10.0.0.1", "n1", rdma=WITH_RDMA)
    row = collective.as_check(result, [rdma_node], [])
    assert (
        row.status == Status.WARN
        and "NCCL used sockets although there are RDMA devices on 10.0.0.1 (n1)" in row.summary
    )


def _rank_process(spec: dict[str, object], out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(collective.run_rank(spec))


def test_a_real_gloo_all_reduce_between_two_processes() -> None:
    port = collective.RankWorker().free_port("127.0.0.1")
    spec = {"backend": "gloo", "master": "127.0.0.1", "port": port, "world": 2, "size_mib": 1, "reps": 3}
    spec["timeout"] = 60
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    ranks = [context.Process(target=_rank_process, args=({**spec, "rank": r, "node": f"n{r}"}, out)) for r in (0, 1)]
    for process in ranks:
        process.start()
    results = sorted((out.get(timeout=120) for _ in ranks), key=lambda r: r["rank"])
    for process in ranks:
        process.join(30)
    assert [r.get("error", "") for r in results] == ["", ""], results
    assert all(r["sum_ok"] and r["sum"] == [3.0] * 4 for r in results)
    assert results[0]["algbw_gbps"] > 0 and results[0]["latency_us"] > 0 and results[0]["nccl"] == {}


def test_rank_zero_port_is_free_on_the_address_asked_for() -> None:
    port = collective.RankWorker().free_port("127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
