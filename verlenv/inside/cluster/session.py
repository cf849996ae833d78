"""One `verlenv doctor --cluster` run: attach, gather, compare, optionally the all-reduce, detach."""

from __future__ import annotations

import time
from dataclasses import dataclass

from verlenv.inside.cluster import collective, compare, gather
from verlenv.inside.cluster.collective import CollectiveResult
from verlenv.inside.cluster.compare import ClusterCheck
from verlenv.inside.cluster.gather import Node, NodeAnswer
from verlenv.inside.doctor.model import Status


@dataclass(frozen=True)
class ClusterOptions:
    address: str = "auto"
    timeout: float = 120.0  # for the nodes' answers; the all-reduce gets as long again
    collective: bool = False
    collective_mib: float = 8.0
    reps: int = 10
    skip: tuple[str, ...] = ()  # doctor check ids each node skips
    strict: bool = False


@dataclass(frozen=True)
class ClusterReport:
    address: str
    answers: tuple[NodeAnswer, ...]
    dead: tuple[Node, ...]  # listed by the cluster as dead before the check started
    checks: tuple[ClusterCheck, ...]
    collective: CollectiveResult | None
    seconds: float

    def exit_code(self, strict: bool) -> int:
        failing = {Status.FAIL, Status.CRASHED} | ({Status.WARN} if strict else set())
        return 1 if any(c.status in failing for c in self.checks) else 0


def run(options: ClusterOptions) -> ClusterReport:
    with gather.stdout_to_stderr():
        return _run(options)


def _run(options: ClusterOptions) -> ClusterReport:
    started = time.monotonic()
    ray = gather.attach(options.address, options.timeout)
    try:
        alive, dead = gather.list_nodes(ray)
        args = [arg for skip in options.skip for arg in ("--skip", skip)]
        args += ["--timeout", f"{min(60.0, max(options.timeout / 2, 5.0)):g}"]  # each node's import probe
        answers = gather.gather(ray, alive, options.timeout, args)
        checks = compare.compare(answers)
        result = None
        if options.collective:
            nodes = [a.node for a in answers if a.state == "answered"]
            result = collective.run(ray, nodes, options.timeout, options.collective_mib, options.reps)
            checks.append(collective.as_check(result, answers, checks))
    finally:
        gather.detach(ray)
    return ClusterReport(
        options.address, tuple(answers), tuple(dead), tuple(checks), result, time.monotonic() - started
    )
