"""Lint findings as a readable list, or versioned JSON."""

from __future__ import annotations

from verlenv.inside.configlint.rules import Finding
from verlenv.inside.configlint.schema import VerlSchema


def to_json(schema: VerlSchema, findings: list[Finding], code: int) -> dict:  # type: ignore[type-arg]
    return {
        "schema_version": 1,
        "tool": "verlenv lint-config",
        "verl_version": schema.version,
        "source": schema.source,
        "exit_code": code,
        "findings": [f.__dict__ for f in findings],
    }


def render(schema: VerlSchema, findings: list[Finding]) -> str:
    head = f"linted against verl {schema.version} ({schema.source})"
    if not findings:
        return f"{head}: no problems found"
    lines = [head, ""]
    for finding in findings:
        lines += [
            f"{finding.severity:<7} {finding.location}",
            f"        {finding.message}",
            f"        fix: {finding.fix}",
        ]
    errors = sum(f.severity == "error" for f in findings)
    lines.append(f"\n{errors} error(s), {len(findings) - errors} warning(s)")
    return "\n".join(lines)
