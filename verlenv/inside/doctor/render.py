"""Doctor output: a readable table, or versioned JSON that validates against the shipped schema."""

from __future__ import annotations

from collections import Counter
from typing import Any

from verlenv import __version__
from verlenv.inside.doctor.model import Outcome, Status

SCHEMA_VERSION = 1
_MARK = {
    Status.OK: "[ok]  ",
    Status.WARN: "[warn]",
    Status.FAIL: "[FAIL]",
    Status.SKIP: "[skip]",
    Status.CRASHED: "[CRASH]",
}


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    seen = Counter(o.result.status.value for o in outcomes)
    return {s.value: seen.get(s.value, 0) for s in Status}


def to_json(outcomes: list[Outcome], mode: str, exit_code: int) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "verlenv doctor",
        "verlenv_version": __version__,
        "mode": mode,
        "exit_code": exit_code,
        "summary": counts(outcomes),
        "checks": [
            {
                "id": o.id,
                "title": o.title,
                "status": o.result.status.value,
                "summary": o.result.summary,
                "details": list(o.result.details),
                "fix": o.result.fix,
                "seconds": round(o.seconds, 4),
            }
            for o in outcomes
        ],
    }


def to_table(outcomes: list[Outcome], verbose: bool) -> str:
    width = max(len(o.id) for o in outcomes)
    lines = []
    for outcome in outcomes:
        timing = f"  ({outcome.seconds * 1000:.0f} ms)" if verbose else ""
        lines.append(f"{_MARK[outcome.result.status]} {outcome.id.ljust(width)}  {outcome.result.summary}{timing}")
        interesting = outcome.result.status in (Status.FAIL, Status.WARN, Status.CRASHED)
        if interesting or verbose:
            lines += [f"{' ' * (width + 10)}{d}" for d in outcome.result.details[: None if verbose else 8]]
        if interesting and outcome.result.fix:
            lines.append(f"{' ' * (width + 10)}fix: {outcome.result.fix}")
    tally = counts(outcomes)
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in tally.items() if n) or "no checks ran")
    return "\n".join(lines)
