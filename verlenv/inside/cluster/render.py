"""`doctor --cluster` output: a table with one column per node, the findings below it, or versioned JSON."""

from __future__ import annotations

from collections import Counter
from typing import Any

from verlenv import __version__
from verlenv.inside.cluster.compare import Cell
from verlenv.inside.cluster.gather import NodeAnswer
from verlenv.inside.cluster.session import ClusterReport
from verlenv.inside.doctor.model import Status
from verlenv.output import table

SCHEMA_VERSION = 1
CELL_MARK = {Status.FAIL: "!! ", Status.CRASHED: "!! ", Status.WARN: "! "}
VERDICT = {Status.OK: "ok", Status.WARN: "warn", Status.FAIL: "FAIL", Status.SKIP: "skip", Status.CRASHED: "CRASH"}


def counts(report: ClusterReport) -> dict[str, int]:
    seen = Counter(c.status.value for c in report.checks)
    return {s.value: seen.get(s.value, 0) for s in Status}


def _node(answer: NodeAnswer) -> dict[str, Any]:
    node = answer.node
    picks = answer.facts.picks(node.ip) if answer.facts else {}
    return {
        "label": node.label,
        "node_id": node.node_id,
        "ip": node.ip,
        "hostname": node.hostname,
        "is_head": node.is_head,
        "gpus": node.gpus,
        "state": answer.state,
        "seconds": round(answer.seconds, 3),
        "error": answer.error,
        "picks": {who: pick.to_json() for who, pick in picks.items()},
        "doctor": answer.doctor,
    }


def to_json(report: ClusterReport, exit_code: int) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "verlenv doctor --cluster",
        "verlenv_version": __version__,
        "address": report.address,
        "exit_code": exit_code,
        "seconds": round(report.seconds, 3),
        "summary": counts(report),
        "nodes": [_node(a) for a in report.answers],
        "dead_nodes": [{"node_id": n.node_id, "label": n.label} for n in report.dead],
        "checks": [c.to_json() for c in report.checks],
        "collective": report.collective.to_json() if report.collective else None,
    }


def _cell(cell: Cell | None) -> str:
    if cell is None:
        return "-"
    return CELL_MARK.get(cell.status, "") + cell.text


def to_table(report: ClusterReport) -> str:
    labels = [a.node.label + (" *" if a.node.is_head else "") for a in report.answers]
    keys = [a.node.label for a in report.answers]
    rows = [
        [check.id, *(_cell(check.cells.get(key)) for key in keys), VERDICT[check.status]] for check in report.checks
    ]
    lines = [
        f"verlenv doctor --cluster: {len(keys)} node(s) at {report.address}, {report.seconds:.1f} s (* head node)",
        "",
        table(["check", *labels, "verdict"], rows),
    ]
    if report.dead:
        lines.append(f"listed as dead before the check: {', '.join(n.label for n in report.dead)}")
    lines.append("")
    for check in report.checks:
        if check.status in (Status.OK, Status.SKIP):
            continue
        lines.append(f"[{VERDICT[check.status]}] {check.id}: {check.summary}")
        if check.fix:
            lines.append(f"{' ' * 7}fix: {check.fix}")
    done = next((c for c in report.checks if c.id == "collective" and c.status == Status.OK), None)
    if done:
        lines.append(f"collective: {done.summary}")
    tally = counts(report)
    lines.append(", ".join(f"{n} {s}" for s, n in tally.items() if n))
    return "\n".join(lines)
