"""Cross-node verdicts: one row per check, one cell per node, and the node at fault named.

Where nodes disagree, the value most nodes have is the reference and the others are at fault; on
a tie the head node's value is the reference (the driver usually runs there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from verlenv.inside.cluster import netsel, rdma
from verlenv.inside.cluster.gather import NodeAnswer
from verlenv.inside.doctor.model import Status

# worst first: a row's verdict is the worst of its cells
SEVERITY = (Status.CRASHED, Status.FAIL, Status.WARN, Status.OK, Status.SKIP)
VERSIONS = ("python", "torch", "vllm", "sglang", "verl", "ray", "nccl", "driver")
# doctor's own checks shown in rows of their own; the rest are folded into the `doctor` row
OWN_ROWS = {"shm": "/dev/shm size", "nccl": "the libnccl loaded vs torch's", "rdma": "RDMA readiness"}
ADDRESS_FIX = {
    "ray": "ray start --node-ip-address=ADDRESS (an address on the network that joins the nodes)",
    "nccl": "NCCL_SOCKET_IFNAME=IFACE (the interface that joins the nodes) on every node, before `ray start`",
    "gloo": "GLOO_SOCKET_IFNAME=IFACE on every node, or make the hostname resolve to that interface's address",
}


@dataclass(frozen=True)
class Cell:
    status: Status
    text: str


@dataclass(frozen=True)
class ClusterCheck:
    id: str
    title: str
    status: Status
    summary: str
    cells: Mapping[str, Cell] = field(default_factory=dict)  # node label -> cell
    culprits: tuple[str, ...] = ()  # labels of the nodes at fault
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "summary": self.summary,
            "culprits": list(self.culprits),
            "fix": self.fix,
            "cells": {label: {"status": c.status.value, "text": c.text} for label, c in self.cells.items()},
        }


def worst(statuses: Sequence[Status]) -> Status:
    return min(statuses, key=SEVERITY.index) if statuses else Status.SKIP


def reference(values: Mapping[str, str], answers: Sequence[NodeAnswer]) -> str:
    """The value most nodes have; on a tie, the head node's (else the first node's)."""
    counts = Counter(values.values())
    top = max(counts.values())
    leaders = [v for v, n in counts.items() if n == top]
    if len(leaders) == 1:
        return leaders[0]
    for answer in answers:
        if answer.node.is_head and answer.node.label in values:
            return values[answer.node.label]
    return values[next(iter(values))]


def _differ(what: str, values: Mapping[str, str], ref: str) -> tuple[tuple[str, ...], str]:
    culprits = tuple(label for label, v in values.items() if v != ref)
    said = "; ".join(f"{label} has {values[label] or 'none'}" for label in culprits)
    return culprits, f"{said}; the other nodes have {what} {ref or 'none'}"


# -- the rows ---------------------------------------------------------------------------------


def check_answered(answers: Sequence[NodeAnswer]) -> ClusterCheck:
    cells, lost = {}, []
    for a in answers:
        if a.state == "answered":
            cells[a.node.label] = Cell(Status.OK, f"yes, {a.seconds:.1f} s")
            continue
        lost.append(a)
        cells[a.node.label] = Cell(Status.FAIL, {"no-answer": "NO ANSWER", "died": "DIED"}.get(a.state, "ERROR"))
    if not lost:
        return ClusterCheck("answered", "Every node answered", Status.OK, f"{len(answers)} node(s)", cells)
    said = "; ".join(f"{a.node.label}: {_lost_text(a)}" for a in lost)
    return ClusterCheck(
        "answered",
        "Every node answered",
        Status.FAIL,
        said,
        cells,
        tuple(a.node.label for a in lost),
        fix="look at that node: `ray status`, its raylet log (/tmp/ray/session_latest/logs), `verlenv doctor` there",
    )


def _lost_text(answer: NodeAnswer) -> str:
    if answer.state == "no-answer":
        return f"stopped answering: {answer.error} (hung, frozen or cut off)"
    if answer.state == "died":
        return f"died during the check ({answer.error})"
    return answer.error


def check_same_image(answered: Sequence[NodeAnswer]) -> ClusterCheck:
    title = "Same image on every node (manifest sha256, image ID)"
    facts = {a.node.label: a.facts for a in answered if a.facts}
    if not any(f.manifest_sha256 for f in facts.values()):
        return ClusterCheck("same-image", title, Status.SKIP, "no node has an image manifest (not verlenv images)")
    with_id = all(f.image_id for f in facts.values())
    values = {label: f.manifest_sha256 + (f"/{f.image_id}" if with_id else "") for label, f in facts.items()}
    cells = {label: Cell(Status.OK, _image_text(f.manifest_sha256, f.image_id)) for label, f in facts.items()}
    ref = reference(values, answered)
    if all(v == ref for v in values.values()):
        return ClusterCheck("same-image", title, Status.OK, f"every node runs {cells[next(iter(cells))].text}", cells)
    culprits = tuple(label for label, v in values.items() if v != ref)
    for label in culprits:
        cells[label] = Cell(Status.FAIL, cells[label].text)
    sha, _, image_id = ref.partition("/")
    ref_text = _image_text(sha, image_id)
    said = "; ".join(f"{label} runs {cells[label].text}" for label in culprits)
    return ClusterCheck(
        "same-image",
        title,
        Status.FAIL,
        f"{said}; the other nodes run {ref_text}",
        cells,
        culprits,
        fix="run one image (by digest) on every node: `verlenv pull NAME` prints the digest",
    )


def _image_text(sha: str, image_id: str) -> str:
    text = f"manifest {sha[:12]}" if sha else "no manifest"
    return text + (f", image {image_id.removeprefix('sha256:')[:12]}" if image_id else "")


def check_same_version(answered: Sequence[NodeAnswer], key: str) -> ClusterCheck | None:
    values = {a.node.label: a.facts.versions.get(key, "") for a in answered if a.facts}
    if not any(values.values()):
        return None  # nobody has it: nothing to compare, no row
    name = "driver major" if key == "driver" else key
    cells = {label: Cell(Status.OK, v or "-") for label, v in values.items()}
    ref = reference(values, answered)
    check_id, title = f"same-{key}", f"Same {name} on every node"
    if all(v == ref for v in values.values()):
        return ClusterCheck(check_id, title, Status.OK, f"{name} {ref} everywhere", cells)
    status = Status.WARN if key == "driver" else Status.FAIL
    culprits, summary = _differ(name, values, ref)
    for label in culprits:
        cells[label] = Cell(status, values[label] or "-")
    return ClusterCheck(
        check_id, title, status, summary, cells, culprits, fix="run the same image (or environment) on every node"
    )


def check_addresses(answered: Sequence[NodeAnswer], who: str) -> ClusterCheck:
    title = {"ray": "Ray's node address", "nccl": "NCCL's socket interface", "gloo": "Gloo's interface"}[who]
    picks = {a.node.label: a.facts.picks(a.node.ip)[who] for a in answered if a.facts}
    hazard_status = Status.FAIL if len(picks) > 1 else Status.WARN  # one node: loopback works, two: it cannot
    # NCCL and Gloo do not start without an interface; Ray registered, so an address it reached (NAT) may do
    problem_status = Status.WARN if who == "ray" else Status.FAIL
    cells, problems = {}, {}
    for label, pick in picks.items():
        issues = ([pick.problem] if pick.problem else []) + list(netsel.hazards(pick))
        status = problem_status if pick.problem else hazard_status if issues else Status.OK
        cells[label] = Cell(status, pick.label)
        if issues:
            problems[label] = f"{pick.how} -> {pick.label} ({', '.join(issues)})"
    networks = {label: p.network for label, p in picks.items() if label not in problems and p.network}
    if networks:
        ref = reference(networks, answered)
        for label in (label for label, net in networks.items() if net != ref):
            cells[label] = Cell(Status.WARN, picks[label].label)
            problems[label] = f"{picks[label].label} is in {networks[label]}, the other nodes in {ref}"
    status = worst([c.status for c in cells.values()])
    check_id = f"{who}-address"
    if not problems:
        nets = sorted({p.network for p in picks.values() if p.network})
        return ClusterCheck(check_id, title, status, f"every node picks an address in {', '.join(nets)}", cells)
    culprits = tuple(problems)
    summary = "; ".join(f"{label}: {problems[label]}" for label in culprits)
    return ClusterCheck(check_id, title, status, summary, cells, culprits, fix=ADDRESS_FIX[who])


def check_doctor(answered: Sequence[NodeAnswer], check_id: str) -> ClusterCheck:
    """One of doctor's own checks as a row: each node's result, the worst as the verdict."""
    results = {a.node.label: a.checks.get(check_id) for a in answered}
    cells = {
        label: Cell(Status(r["status"]), _short(r["summary"])) if r else Cell(Status.SKIP, "not run")
        for label, r in results.items()
    }
    status = worst([c.status for c in cells.values()])
    title = OWN_ROWS[check_id]
    if status in (Status.OK, Status.SKIP):
        first = next((r for r in results.values() if r), None)
        return ClusterCheck(check_id, title, status, first["summary"] if first else "not run", cells)
    culprits = tuple(label for label, c in cells.items() if c.status == status)
    found = {label: results[label] for label in culprits}
    said = {r["summary"] for r in found.values() if r}
    if len(culprits) == len(cells) > 1 and len(said) == 1:
        summary = f"every node: {said.pop()}"
    else:
        summary = "; ".join(f"{label}: {r['summary']}" for label, r in found.items() if r)
    return ClusterCheck(
        check_id, title, status, summary, cells, culprits, fix=next((r["fix"] for r in found.values() if r), "")
    )


def check_rdma(answered: Sequence[NodeAnswer]) -> ClusterCheck:
    """doctor's rdma row, plus the cross-node rule: RDMA devices on some nodes only is a failure."""
    row = check_doctor(answered, "rdma")
    short = {a.node.label: _rdma_text(a.facts.rdma) for a in answered if a.facts}
    row = replace(row, cells={label: Cell(c.status, short.get(label, c.text)) for label, c in row.cells.items()})
    with_devices = [a.node.label for a in answered if a.facts and a.facts.rdma.uverbs]
    without = [a.node.label for a in answered if a.facts and not a.facts.rdma.uverbs]
    if not with_devices or not without:
        return row
    return ClusterCheck(
        row.id,
        row.title,
        Status.FAIL,
        f"RDMA devices on {', '.join(with_devices)} but not on {', '.join(without)}: NCCL needs one transport "
        "for all ranks and falls back to sockets (or fails)",
        {**row.cells, **{label: Cell(Status.FAIL, row.cells[label].text) for label in without}},
        tuple(without),
        fix="give every node its RDMA devices (--device=/dev/infiniband), or keep the job on nodes that have them",
    )


def _rdma_text(facts: rdma.RdmaFacts) -> str:
    devices = ", ".join(h.split(" ")[0] for h in facts.hcas) or ", ".join(facts.uverbs) or "no RDMA devices"
    userspace = f"libibverbs + {len(facts.providers)} providers" if facts.libibverbs else "no libibverbs"
    return f"{devices}, {userspace}"


def check_doctor_rest(answered: Sequence[NodeAnswer]) -> ClusterCheck:
    """doctor's other checks, one cell per node: which failed or warned there."""
    cells, said = {}, []
    for a in answered:
        bad = {i: c for i, c in a.checks.items() if i not in OWN_ROWS and c["status"] in ("fail", "crashed", "warn")}
        status = worst([Status(c["status"]) for c in bad.values()]) if bad else Status.OK
        passed = sum(c["status"] == "ok" for i, c in a.checks.items() if i not in OWN_ROWS)
        cells[a.node.label] = Cell(status, ", ".join(bad) if bad else f"{passed} checks ok")
        said += [f"{a.node.label}: {i} {c['status']}: {c['summary']}" for i, c in bad.items()]
    status = worst([c.status for c in cells.values()])
    culprits = tuple(label for label, c in cells.items() if c.status == status and status != Status.OK)
    summary = "; ".join(said) if said else "doctor's other checks pass on every node"
    fix = "run `verlenv doctor` on that node for the details and fixes" if said else ""
    return ClusterCheck("doctor", "doctor's other checks on each node", status, summary, cells, culprits, fix)


def _short(text: str, width: int = 34) -> str:
    head = text.split(": ")[0].split("; ")[0]
    return head if len(head) <= width else head[: width - 1] + "…"


def compare(answers: Sequence[NodeAnswer]) -> list[ClusterCheck]:
    answered = [a for a in answers if a.state == "answered" and a.facts]
    rows = [check_answered(answers)]
    if not answered:
        return rows
    rows.append(check_same_image(answered))
    rows += [row for row in (check_same_version(answered, key) for key in VERSIONS) if row]
    rows += [check_addresses(answered, who) for who in ("ray", "nccl", "gloo")]
    rows += [check_rdma(answered), check_doctor(answered, "shm"), check_doctor(answered, "nccl")]
    rows.append(check_doctor_rest(answered))
    return rows
