"""gather's control flow against a stand-in `ray` module: deadlines, dead nodes, attach errors.

The real thing runs in tests/integration/test_cluster.py; here the edges are forced: a node that
never answers, one whose task raises NodeDiedError, one whose doctor printed no JSON, and a
cluster that is not there or does not answer ray.init.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest

from tests.helpers.clusterfacts import answer
from verlenv.errors import ConfigError
from verlenv.inside.cluster import gather
from verlenv.inside.cluster.gather import Node


class NodeDiedError(Exception):
    pass


class FakeRay(types.ModuleType):
    """ray.remote/wait/get/cancel over results given per node id: a dict, an exception, or None (hangs)."""

    def __init__(self, results: dict[str, Any]) -> None:
        super().__init__("ray")
        self.results, self.cancelled = results, []
        self.util = types.SimpleNamespace()

    def remote(self, **_: Any) -> Any:
        def wrap(function: Any) -> Any:
            class Task:
                def options(self, scheduling_strategy: Any) -> Any:
                    node_id = scheduling_strategy
                    return types.SimpleNamespace(remote=lambda *args: node_id)

            return Task()

        return wrap

    def wait(self, refs: list[str], num_returns: int, timeout: float) -> tuple[list[str], list[str]]:
        ready = [r for r in refs if self.results[r] is not None][:num_returns]
        if not ready:
            time.sleep(min(timeout, 0.2))
        return ready, [r for r in refs if r not in ready]

    def get(self, ref: str, timeout: float) -> Any:
        value = self.results[ref]
        if isinstance(value, Exception):
            raise value
        return value

    def cancel(self, ref: str, force: bool) -> None:
        self.cancelled.append(ref)


def test_late_dead_and_broken_nodes_each_get_their_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gather, "pinned", lambda node: node.node_id)
    good = answer("10.0.0.1", "n1", head=True)
    results = {
        "n1": {"doctor": dict(good.doctor or {}), "seconds": 2.0},
        "n2": None,  # never answers
        "n3": NodeDiedError("Task failed because the node it was running on is dead. Node IP: 10.0.0.3"),
        "n4": {"error": "verlenv doctor exited 2 without JSON: unrecognized arguments", "seconds": 1.0},
        "n5": {"doctor": {"checks": [], "node": {"hostname": "n5"}}, "seconds": 1.0},  # another verlenv's facts
    }
    ray = FakeRay(results)
    nodes = [Node(i, f"10.0.0.{i[1]}", i) for i in results]
    started = time.monotonic()
    answers = {a.node.node_id: a for a in gather.gather(ray, nodes, timeout=1.0, doctor_args=[])}
    assert time.monotonic() - started < 3
    assert {k: a.state for k, a in answers.items()} == {
        "n1": "answered",
        "n2": "no-answer",
        "n3": "died",
        "n4": "error",
        "n5": "error",
    }
    assert answers["n3"].error == "NodeDiedError: Task failed because the node it was running on is dead"
    assert answers["n2"].error == "no answer within 1 s" and ray.cancelled == ["n2"]
    assert "do not parse here" in answers["n5"].error


def test_attach_turns_a_missing_or_silent_cluster_into_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = types.ModuleType("ray")

    def refuse(**_: Any) -> None:
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    ray.init = refuse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", ray)
    with pytest.raises(ConfigError, match="no Ray cluster to attach to at address='auto': Could not find") as info:
        gather.attach("auto", 5)
    assert info.value.exit_code == 2 and "ray start --head" in info.value.hint
    release = threading.Event()
    ray.init = lambda **_: release.wait(30)  # type: ignore[attr-defined]
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"ray\.init did not return within 1 s"):
        gather.attach("10.0.0.1:6379", 1)
    release.set()
    assert time.monotonic() - started < 5
