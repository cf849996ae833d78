"""`verlenv release`: lock check -> verify -> build -> accept -> publish, stopping at the first failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import CheckFailed, VerlenvError
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache


@dataclass(frozen=True)
class StageResult:
    name: str
    ok: bool
    seconds: float
    artifact: str
    exit_code: int = 0


def stages(
    paths: ProjectPaths, profile: str, cache: Cache, registry: str, catalog_path: Path, quiet: bool
) -> list[tuple[str, Callable[[], str]]]:
    from verlenv.accept.image import accept_image
    from verlenv.image.build import BuildOptions, build_image
    from verlenv.lock.resolve import require_fresh
    from verlenv.release.publish import publish
    from verlenv.verify.report import verify_profile, write_report

    def check_lock() -> str:
        require_fresh(paths, profile, f"lock for {profile}")
        return str(paths.lock(profile))

    def verify() -> str:
        report = verify_profile(paths, profile, cache, quiet=quiet)
        write_report(report, paths.verify_report(profile))
        if not report.ok:
            raise CheckFailed(f"verify failed for {profile}")
        return str(paths.verify_report(profile))

    def build() -> str:
        return build_image(paths, profile, cache, BuildOptions(quiet=quiet)).tags[0]

    def accept() -> str:
        report, where = accept_image(paths, profile, cache)
        if not report["passed"]:
            raise CheckFailed(f"acceptance failed for {profile}; report: {where}")
        return str(where)

    def publish_stage() -> str:
        return publish(paths, profile, cache, registry, catalog_path).entry.by_digest

    return [
        ("lock-check", check_lock),
        ("verify", verify),
        ("build", build),
        ("accept", accept),
        ("publish", publish_stage),
    ]


def run_release(plan: list[tuple[str, Callable[[], str]]]) -> list[StageResult]:
    results: list[StageResult] = []
    for name, func in plan:
        started = time.monotonic()
        try:
            artifact = func()
        except VerlenvError as exc:
            results.append(StageResult(name, False, time.monotonic() - started, exc.message, exc.exit_code))
            break
        results.append(StageResult(name, True, time.monotonic() - started, artifact))
    return results
