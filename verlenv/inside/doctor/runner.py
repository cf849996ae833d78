"""Run checks in isolation: one crashing check never hides the others; output is redacted."""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from verlenv.errors import MissingDependency
from verlenv.inside.doctor.checks_runtime import SECRET_NAME
from verlenv.inside.doctor.model import Check, Facts, Outcome, Result, Status

_GPU_UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")


def run_checks(checks: Iterable[Check], facts: Facts) -> list[Outcome]:
    selected = list(checks)
    # The import probe and the ELF scan are the slow ones; running checks side by side overlaps them.
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda c: _run_one(c, facts), selected))
    return outcomes


def _run_one(check: Check, facts: Facts) -> Outcome:
    started = time.perf_counter()
    try:
        result = check.run(facts)
    except MissingDependency as exc:  # the environment lacks a package: a finding, not a doctor bug
        result = Result(Status.FAIL, exc.message, fix=exc.hint)
    except Exception as exc:  # noqa: BLE001 - a crashing check is a result, not the end of the report
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        result = Result(
            Status.CRASHED,
            f"the check itself failed: {type(exc).__name__}: {exc}",
            (f"at {frame.filename}:{frame.lineno}",),
            fix="please report this as a verlenv bug",
        )
    return Outcome(check.id, check.title, redact_result(result), time.perf_counter() - started)


def redact(text: str) -> str:
    text = _GPU_UUID.sub(r"\1-<redacted>", text)
    for name, value in os.environ.items():
        if SECRET_NAME.search(name) and len(value) >= 4:
            text = text.replace(value, "<redacted>")
    return text


def redact_result(result: Result) -> Result:
    return Result(result.status, redact(result.summary), tuple(redact(d) for d in result.details), redact(result.fix))
