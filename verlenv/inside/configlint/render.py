"""Lint findings as a readable list, or versioned JSON."""

from __future__ import annotations

from collections.abc import Sequence

from verlenv.inside.configlint.rules import Finding
from verlenv.inside.configlint.schema import VerlSchema

NOT_CHECKED = (
    "not checked here (this lint read a verl wheel, not the environment the job will run in; "
    "--installed-from SITE|MANIFEST|LOCK|PROFILE checks them):"
)


def to_json(schema: VerlSchema, findings: list[Finding], code: int, unchecked: Sequence[str] = ()) -> dict:  # type: ignore[type-arg]
    return {
        "schema_version": 1,
        "tool": "verlenv lint-config",
        "verl_version": schema.version,
        "source": schema.source,
        "exit_code": code,
        "findings": [f.__dict__ for f in findings],
        "not_checked": list(unchecked),
    }


def render(schema: VerlSchema, findings: list[Finding], unchecked: Sequence[str] = ()) -> str:
    head = f"linted against verl {schema.version} ({schema.source})"
    notes = ["", NOT_CHECKED, *(f"  {line}" for line in unchecked)] if unchecked else []
    if not findings:
        return "\n".join([f"{head}: no problems found", *notes])
    lines = [head, ""]
    for finding in findings:
        lines += [
            f"{finding.severity:<7} {finding.location}",
            f"        {finding.message}",
            f"        fix: {finding.fix}",
        ]
    errors = sum(f.severity == "error" for f in findings)
    lines.append(f"\n{errors} error(s), {len(findings) - errors} warning(s)")
    return "\n".join(lines + notes)
