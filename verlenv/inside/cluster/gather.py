"""Attach to a Ray cluster and run `verlenv doctor --json --node-facts` once on every alive node.

One task per node, pinned there (NodeAffinitySchedulingStrategy, soft=False), asking for no CPU so
a busy cluster still runs it; the task runs doctor as a subprocess in that node's own environment.
What has not come back by the deadline is cancelled and reported as "no answer"; a node that dies
under its task is reported as such. Ray is imported only here and in collective.py, only when run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import Any, TypeVar

from verlenv.errors import ConfigError, require
from verlenv.inside.cluster.nodefacts import NodeFacts

T = TypeVar("T")
HEAD_RESOURCE = "node:__internal_head__"
# exception class names Ray raises for a task whose node or worker went away
DIED = {"NodeDiedError", "WorkerCrashedError", "RayletDiedError", "LocalRayletDiedError", "OwnerDiedError"}


@dataclass(frozen=True)
class Node:
    node_id: str
    ip: str
    hostname: str
    is_head: bool = False
    gpus: int = 0

    @property
    def label(self) -> str:
        return f"{self.ip} ({self.hostname})"


@dataclass(frozen=True)
class NodeAnswer:
    node: Node
    state: str  # answered | no-answer | died | error
    seconds: float
    doctor: Mapping[str, Any] | None = None  # the node's `verlenv doctor --json --node-facts`
    error: str = ""

    @cached_property
    def facts(self) -> NodeFacts | None:
        node = (self.doctor or {}).get("node")
        return NodeFacts.from_json(node) if node else None

    @cached_property
    def checks(self) -> dict[str, Mapping[str, Any]]:
        return {c["id"]: c for c in (self.doctor or {}).get("checks", [])}


def bounded(call: Callable[[], T], seconds: float, what: str) -> T:
    """Run ``call`` in a daemon thread; TimeoutError when it has not returned in ``seconds``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name=what)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not return within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def attach(address: str, timeout: float) -> ModuleType:
    """ray, initialised as a driver of the running cluster at ``address``."""
    ray = require("ray", needed_for="verlenv doctor --cluster")
    hint = "start one (`ray start --head` here, `ray start --address HEAD:6379` on the others) or pass --address"

    def init() -> None:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)

    try:
        bounded(init, timeout, "ray.init")
    except Exception as exc:  # noqa: BLE001 - ConnectionError, TimeoutError, a Ray/Python version mismatch
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"no Ray cluster to attach to at address={address!r}: {first}", hint=hint) from None
    return ray


def detach(ray: ModuleType, seconds: float = 15.0) -> None:
    with contextlib.suppress(Exception):
        bounded(ray.shutdown, seconds, "ray.shutdown")


def list_nodes(ray: ModuleType) -> tuple[list[Node], list[Node]]:
    """(alive, dead) nodes as the cluster's GCS lists them, the head first."""
    alive, dead = [], []
    for entry in ray.nodes():
        resources = entry.get("Resources") or {}
        node = Node(
            node_id=entry["NodeID"],
            ip=entry["NodeManagerAddress"],
            hostname=entry.get("NodeManagerHostname") or entry["NodeManagerAddress"],
            is_head=HEAD_RESOURCE in resources,
            gpus=int(resources.get("GPU", 0)),
        )
        (alive if entry.get("Alive") else dead).append(node)
    alive.sort(key=lambda n: (not n.is_head, n.ip, n.hostname))
    return alive, dead


def node_doctor(args: Sequence[str], timeout: float) -> dict[str, Any]:
    """The task body, run on the node: doctor as a subprocess of this node's Python, parsed."""
    started = time.monotonic()
    env = dict(os.environ)
    if env.get("CUDA_VISIBLE_DEVICES") == "":  # Ray < 2.46 blanks it for tasks that ask for no GPU
        del env["CUDA_VISIBLE_DEVICES"]
    command = [sys.executable, "-m", "verlenv", "doctor", "--json", "--node-facts", *args]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"verlenv doctor did not finish within {timeout:.0f} s here", "seconds": timeout}
    seconds = time.monotonic() - started
    try:
        return {"doctor": json.loads(proc.stdout), "seconds": seconds}
    except ValueError:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return {"error": f"verlenv doctor exited {proc.returncode} without JSON: {tail}", "seconds": seconds}


def pinned(node: Node) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)


def gather(ray: ModuleType, nodes: Sequence[Node], timeout: float, doctor_args: Sequence[str]) -> list[NodeAnswer]:
    """Every node's answer, or why there is none, within ``timeout`` seconds."""
    task = ray.remote(num_cpus=0, max_retries=0)(node_doctor)
    started = time.monotonic()
    budget = max(timeout - 5.0, timeout * 0.8)  # the node gives up a little before we do, and says so
    refs = {task.options(scheduling_strategy=pinned(n)).remote(list(doctor_args), budget): n for n in nodes}
    answers: dict[str, NodeAnswer] = {}
    pending = list(refs)
    while pending and (left := started + timeout - time.monotonic()) > 0:
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in ready:
            answers[refs[ref].node_id] = _answer(ray, ref, refs[ref], time.monotonic() - started)
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
        node = refs[ref]
        answers[node.node_id] = NodeAnswer(node, "no-answer", timeout, error=f"no answer within {timeout:.0f} s")
    return [answers[n.node_id] for n in nodes]


def _answer(ray: ModuleType, ref: Any, node: Node, elapsed: float) -> NodeAnswer:
    try:
        value = ray.get(ref, timeout=10)
    except Exception as exc:  # noqa: BLE001 - a node's failure is a finding, not our crash
        name = type(exc).__name__
        first = (str(exc).strip().splitlines() or [""])[0].split(". ")[0][:300]
        return NodeAnswer(node, "died" if name in DIED else "error", elapsed, error=f"{name}: {first}")
    if "error" in value:
        return NodeAnswer(node, "error", value["seconds"], error=value["error"])
    answer = NodeAnswer(node, "answered", value["seconds"], doctor=value["doctor"])
    try:
        answer.facts  # noqa: B018 - parse now: a node whose verlenv reports other facts is an error, not a crash
    except (KeyError, TypeError, ValueError) as exc:
        return NodeAnswer(node, "error", value["seconds"], error=f"its doctor's node facts do not parse here: {exc!r}")
    return answer


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Ray's driver prints cluster events (a raylet that died, ...) to stdout, from Python and C++:
    while attached, file descriptor 1 points at stderr, so stdout carries only the report."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
