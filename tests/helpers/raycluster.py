"""A real multi-node Ray cluster on one machine: image containers joined by a bridge of their own.

Each node is a container started with network_mode="none". The fabric is a network namespace made
for the test that holds a bridge; every node gets a veth pair whose one end is moved (by the
container's PID) into the node's namespace, renamed eth0 and given 10.213.0.N/24. Nothing touches
the host's own interfaces, and deleting the fabric namespace removes the bridge and every veth.
Needs root, `ip` (iproute2) and `nsenter` (util-linux); missing ones fail the test, never skip it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import docker.errors

SUBNET = "10.213.0"
RAY_PORT = 6379
OBJECT_STORE = 100 * 10**6  # bytes; above Ray's 75 MiB minimum, small beside 2 cores' worth of nodes


def _run(*command: str) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def require_tools() -> None:
    missing = [tool for tool in ("ip", "nsenter") if shutil.which(tool) is None]
    assert not missing, f"the cluster tests need {', '.join(missing)} (apt-get install iproute2 util-linux)"


class Fabric:
    """A bridge in a network namespace of its own; attach() plugs a container's namespace into it."""

    def __init__(self, tag: str) -> None:
        self.namespace = f"verlenv-{tag}"
        self.ports = 0
        _run("ip", "netns", "add", self.namespace)
        self._ip("link", "add", "br0", "type", "bridge")
        self._ip("link", "set", "br0", "up")

    def _ip(self, *args: str) -> str:
        return _run("ip", "-n", self.namespace, *args)

    def attach(self, pid: int, address: str) -> None:
        """A veth from the bridge into the namespace of process ``pid``, there named eth0 with ``address``."""
        self.ports += 1
        ours, theirs = f"v{self.ports}", f"p{self.ports}"
        self._ip("link", "add", ours, "type", "veth", "peer", "name", theirs)
        self._ip("link", "set", theirs, "netns", str(pid))
        self._ip("link", "set", ours, "master", "br0", "up")
        inside = ("nsenter", "-t", str(pid), "-n", "ip")
        _run(*inside, "link", "set", theirs, "name", "eth0")
        _run(*inside, "addr", "add", f"{address}/24", "dev", "eth0")
        _run(*inside, "link", "set", "eth0", "up")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            _run("ip", "netns", "del", self.namespace)


@dataclass(frozen=True)
class NodeSpec:
    name: str  # the hostname: node1, node2, ...
    image: str  # an image ID
    env: Mapping[str, str] = field(default_factory=dict)
    shm_size: str = "2g"


@dataclass
class Node:
    spec: NodeSpec
    address: str
    container: Any  # docker Container
    paused: bool = False

    @property
    def label(self) -> str:
        return f"{self.address} ({self.spec.name})"

    def exec(self, command: Sequence[str], timeout: float = 300) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``command`` in this node, bounded by ``timeout`` seconds."""
        box: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: box.update(r=self.container.exec_run(list(command), demux=True)))
        thread.start()
        thread.join(timeout)
        assert not thread.is_alive(), f"{' '.join(command)} on {self.label} ran past {timeout} s"
        code, (out, err) = box["r"]
        return int(code), (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")

    def running(self, needle: str) -> bool:
        """Whether a process whose command line holds ``needle`` runs in this node (docker top, from outside)."""
        top = self.container.top(ps_args="-eo pid,args")
        return any(needle in " ".join(str(p) for p in proc) for proc in top.get("Processes") or [])

    def pause(self, attempts: int = 5) -> None:
        """Freeze the node. The cgroup-v1 freezer can fail to freeze while processes are being forked
        in the cgroup, and runc then thaws it and reports "unable to freeze" (opencontainers/runc#2753,
        #2791: "still a game of chances"). The tests freeze a node exactly while it forks its checks,
        so a failed freeze is tried again; any other refusal, or the last one, is raised."""
        for attempt in range(1, attempts + 1):
            try:
                self.container.pause()
                break
            except docker.errors.APIError as error:
                if "unable to freeze" not in str(error) or attempt == attempts:
                    raise
                time.sleep(0.2)
        self.paused = True

    def kill_raylet_and_worker_of(self, needle: str) -> None:
        """Kill (by host PID) this node's raylet and the Ray worker whose child runs ``needle``: the node dies."""
        processes = self.container.top(ps_args="-eo pid,ppid,args").get("Processes") or []
        workers = {int(p[1]) for p in processes if needle in p[2]}
        raylets = {int(p[0]) for p in processes if "raylet/raylet" in p[2]}
        assert workers and raylets, f"no raylet or no worker running {needle!r} on {self.label}"
        for pid in (*workers, *raylets):
            os.kill(pid, signal.SIGKILL)


class RayCluster:
    """Nodes started in parallel, joined by a Fabric, Ray head on the first and workers on the rest."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tag = secrets.token_hex(3)
        self.fabric: Fabric | None = None
        self.nodes: list[Node] = []

    def start(self, specs: Sequence[NodeSpec]) -> None:
        require_tools()
        self.fabric = Fabric(self.tag)
        hosts = {s.name: f"{SUBNET}.{i + 1}" for i, s in enumerate(specs)}
        with ThreadPoolExecutor(len(specs)) as pool:
            futures = [pool.submit(self._start, s, hosts) for s in specs]
        errors = []
        for future in futures:  # keep every node that started, so close() removes it
            try:
                self.nodes.append(future.result())
            except Exception as exc:  # noqa: BLE001 - raised below, after the others are recorded
                errors.append(exc)
        if errors:
            raise errors[0]
        for node in self.nodes:
            self.fabric.attach(node.container.attrs["State"]["Pid"], node.address)
        self._ray_start()

    def _start(self, spec: NodeSpec, hosts: Mapping[str, str]) -> Node:
        container = self.engine.containers.run(
            spec.image,
            ["sleep", "infinity"],
            detach=True,
            name=f"verlenv-cluster-{self.tag}-{spec.name}",
            hostname=spec.name,
            network_mode="none",
            extra_hosts=dict(hosts),
            shm_size=spec.shm_size,
            environment={"RAY_USAGE_STATS_ENABLED": "0", "VERLENV_IMAGE_ID": spec.image, **spec.env},
        )
        container.reload()
        return Node(spec, hosts[spec.name], container)

    def _ray_start(self) -> None:
        head = self.nodes[0]
        common = ["--node-ip-address", "", "--disable-usage-stats", "--num-cpus", "1"]
        common += ["--object-store-memory", str(OBJECT_STORE)]
        self._ray(head, ["ray", "start", "--head", "--port", str(RAY_PORT), "--include-dashboard=false", *common])
        with ThreadPoolExecutor(max(len(self.nodes) - 1, 1)) as pool:
            join = ["ray", "start", "--address", f"{head.address}:{RAY_PORT}", *common]
            list(pool.map(lambda n: self._ray(n, join), self.nodes[1:]))

    def _ray(self, node: Node, command: list[str]) -> None:
        command = [node.address if arg == "" else arg for arg in command]
        code, out, err = node.exec(command, timeout=180)
        assert code == 0, f"{' '.join(command)} on {node.label}: {out[-2000:]}{err[-2000:]}"

    def doctor(self, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any], float]:
        """`verlenv doctor --cluster --json ARGS` run on the head node: (exit code, report, seconds)."""
        started = time.monotonic()
        code, out, err = self.nodes[0].exec(["verlenv", "doctor", "--cluster", "--json", *args], timeout=timeout)
        assert code in (0, 1), f"exit {code}: {err[-3000:]}"
        return code, json.loads(out), time.monotonic() - started

    def doctor_table(self, *args: str, timeout: float = 300) -> tuple[int, str]:
        code, out, err = self.nodes[0].exec(["verlenv", "doctor", "--cluster", *args], timeout=timeout)
        assert code in (0, 1), f"exit {code}: {err[-3000:]}"
        return code, out

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(docker.errors.APIError):
                if node.paused:
                    node.container.unpause()
            with contextlib.suppress(docker.errors.APIError):
                node.container.remove(force=True)
        if self.fabric:
            self.fabric.close()


@contextlib.contextmanager
def ray_cluster(engine: Any, specs: Sequence[NodeSpec]) -> Iterator[RayCluster]:
    """A cluster that is torn down (containers, veths, namespace) however the test ends."""
    cluster = RayCluster(engine)
    try:
        cluster.start(specs)
        yield cluster
    finally:
        cluster.close()
