"""The verify stage: metadata and ELF ABI verdicts for a locked wheel set, before any image exists."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from verlenv import atomic
from verlenv.errors import CheckFailed, ConfigError
from verlenv.lock.lockfile import Lock, read_lock
from verlenv.lock.resolve import require_fresh
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import Profile, load_profile
from verlenv.verify.abi import ObjectVerdict, TorchFacts, apply_waivers, check_objects, torch_facts
from verlenv.verify.distmeta import DistMeta, exact_pin, read_meta_kept
from verlenv.verify.metadata import MetaViolation, check_engine_gate, check_requirements, split_overridden
from verlenv.verify.objscan import ObjectError
from verlenv.verify.wheelscan import scan_wheel
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.wheelhouse import Wheelhouse, fetch_release, fill, target_tags

REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class VerifyReport:
    profile: str
    lock_sha256: str
    platform: str
    python: str
    base: str
    torch: TorchFacts | None
    distributions: int
    sdist_only: tuple[str, ...]
    metadata: tuple[MetaViolation, ...]
    objects: tuple[ObjectVerdict, ...]
    errors: tuple[ObjectError, ...]
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    overridden: tuple[tuple[MetaViolation, str], ...] = ()  # violations the profile's overrides answer
    built: tuple[tuple[str, str], ...] = ()  # (name, wheel sha256) built here from a locked sdist, checked as wheels

    @property
    def ok(self) -> bool:
        return not self.metadata and not self.errors and all(v.ok for v in self.objects)

    def to_json(self) -> dict[str, Any]:
        """Deterministic (no times, sorted), so a committed report can be compared with a fresh one."""
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "profile": self.profile,
            "lock_sha256": self.lock_sha256,
            "platform": self.platform,
            "python": self.python,
            "base": self.base,
            "ok": self.ok,
            "torch": {"version": self.torch.version, "cxx11_abi": self.torch.abi} if self.torch else None,
            "distributions": self.distributions,
            "sdist_only": list(self.sdist_only),
            **({"built_from_sdist": dict(self.built)} if self.built else {}),
            "metadata": {
                "ok": not self.metadata,
                "violations": [
                    {"dist": v.dist, "requirement": v.requirement, "problem": v.problem} for v in self.metadata
                ],
            },
            **({"overridden": [_overridden_json(v, why) for v, why in self.overridden]} if self.overridden else {}),
            "extensions": [_verdict_json(v) for v in self.objects],
            "unreadable": [{"owner": e.owner, "path": e.path, "error": e.error} for e in self.errors],
        }


def _overridden_json(violation: MetaViolation, why: str) -> dict[str, str]:
    return {"dist": violation.dist, "requirement": violation.requirement, "problem": violation.problem, "why": why}


def _verdict_json(verdict: ObjectVerdict) -> dict[str, Any]:
    return {
        "owner": verdict.owner,
        "path": verdict.path,
        "ok": verdict.ok,
        "excused": verdict.excused,
        "needs": list(verdict.torch_needs),
        "abi": verdict.abi,
        "torch_symbols": verdict.checked_symbols,
        "findings": [
            {"kind": f.kind, "message": f.message, "fix": f.fix, "count": f.count, "examples": list(f.examples)}
            for f in verdict.findings
        ],
    }


def verify_profile(
    paths: ProjectPaths,
    name: str,
    cache: Cache,
    *,
    offline: bool = False,
    quiet: bool = False,
    jobs: int = 8,
    tries: tuple[str, ...] = (),
) -> VerifyReport:
    """Verify the profile's locked wheel set; ``tries`` ("name==version") swap a locked distribution for
    another release first, to ask what the check would say (the report is then not the lock's)."""
    profile = load_profile(paths, name)
    require_fresh(paths, name, f"lock for {name}")
    lock = read_lock(paths.lock(name))
    timings: dict[str, float] = {}
    started = time.monotonic()
    house = fill(profile, lock, cache, offline=offline, jobs=jobs, quiet=quiet)
    house = _with_built(paths, profile, house, cache)
    if tries:
        house = _swapped(profile, house, tries, cache)
    timings["wheelhouse"] = time.monotonic() - started
    return verify_wheelhouse(profile, lock, house, cache, timings)


def _with_built(paths: ProjectPaths, profile: Profile, house: Wheelhouse, cache: Cache) -> Wheelhouse:
    """A declared extension's sdist replaced by the wheel built from it, when the build is recorded and
    cached here: its compiled extensions are then checked against torch like any other."""
    from verlenv.wheels.builtrecord import builds_path, read

    recorded = read(builds_path(paths, profile.name))
    files = []
    for house_file in house.files:
        record, build = recorded.get(house_file.name), profile.build_of(house_file.name)
        # a record of other architectures or flags is another wheel: the sdist stays unbuilt until
        # `verlenv build` makes this one (and checks it then)
        built = record.house_file(cache) if record and build and record.made_as(build, house_file.sha256) else None
        files.append(built or house_file)
    return replace(house, files=tuple(files))


def _swapped(profile: Profile, house: Wheelhouse, tries: tuple[str, ...], cache: Cache) -> Wheelhouse:
    files = {f.name: f for f in house.files}
    tags = target_tags(profile.python, profile.platform)
    for text in tries:
        requirement = Requirement(text)
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(pins) != 1:
            raise ConfigError(f"--try {text}: give one exact release, as NAME==VERSION")
        name = canonicalize_name(requirement.name)
        files[name] = fetch_release(name, pins[0], cache, tags)
    return replace(house, files=tuple(files.values()))


def verify_wheelhouse(
    profile: Profile, lock: Lock, house: Wheelhouse, cache: Cache, timings: dict[str, float] | None = None
) -> VerifyReport:
    timings = timings if timings is not None else {}
    started = time.monotonic()
    metas = {f.name: read_meta_kept(f.path, cache.meta_path(f.sha256)) for f in house.files}
    replaced = _replaced(lock, house)
    violations = check_requirements(
        metas, [Requirement(r.spec) for r in profile.requirements], profile.python, profile.platform, replaced
    )
    violations += check_engine_gate({n: m.version for n, m in metas.items()})
    violations, overridden = split_overridden(violations, profile.override_reasons)
    timings["metadata"] = time.monotonic() - started
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        scans = list(pool.map(lambda f: scan_wheel(f, cache), [f for f in house.files if f.is_wheel]))
    objects = [o for s in scans for o in s.objects]
    # The torch whose libraries were read is the wheelhouse's (a --try may have swapped it), not the lock's.
    torch_version = next((f.version for f in house.files if f.name == "torch"), None)
    torch = torch_facts(torch_version, objects, locked=lock.version_of("torch") or "") if torch_version else None
    verdicts = (
        check_objects(
            objects, torch, profile.base.facts, _torch_pins(metas), other_names=[n for s in scans for n in s.names]
        )
        if torch
        else []
    )
    verdicts = apply_waivers(verdicts, profile.waivers)
    timings["elf"] = time.monotonic() - started
    return VerifyReport(
        profile=profile.name,
        lock_sha256=lock.sha256,
        platform=profile.platform,
        python=profile.python,
        base=profile.base.name,
        torch=torch,
        distributions=len(house.files),
        sdist_only=tuple(sorted(f.name for f in house.files if not f.is_wheel)),
        built=tuple(sorted((f.name, f.sha256) for f in house.files if f.is_wheel and profile.build_of(f.name))),
        metadata=tuple(dict.fromkeys(violations)),
        overridden=tuple(dict.fromkeys(overridden)),
        objects=tuple(verdicts),
        errors=tuple(e for s in scans for e in s.errors),
        timings=timings,
    )


def _replaced(lock: Lock, house: Wheelhouse) -> dict[str, str]:
    """dist -> the lock's version, for each distribution checked at another release (verify --try)."""
    locked = {f.name: lock.version_of(f.name) or "" for f in house.files}
    return {f.name: locked[f.name] for f in house.files if locked[f.name] not in ("", f.version)}


def _torch_pins(metas: dict[str, DistMeta]) -> dict[str, str]:
    """dist -> the exact torch version its Requires-Dist pins (torch==X), for fix hints."""
    return {name: pin for name, meta in metas.items() if (pin := exact_pin(meta.requires_dist))}


def require_verified(paths: ProjectPaths, name: str, doing: str) -> tuple[Profile, Lock, str]:
    """(profile, lock, sha256 of its verify report) when the lock is fresh and its committed verify
    report passed for exactly this lock; CheckFailed naming what is missing otherwise. Every stage
    that installs the wheels (image, venv, bundle) passes this gate first."""
    profile = load_profile(paths, name)
    require_fresh(paths, name, f"{doing}: its lock")
    lock = read_lock(paths.lock(name))
    report_file = paths.verify_report(name)
    hint = f"verlenv verify --profile {name}"
    if not report_file.exists():
        raise CheckFailed(f"{doing}: no verify report at {report_file}", hint=hint)
    report = json.loads(report_file.read_text())
    if report.get("lock_sha256") != lock.sha256:
        raise CheckFailed(f"{doing}: {report_file.name} was made for another lock", hint=hint)
    if not report.get("ok"):
        raise CheckFailed(f"{doing}: its verify report failed", hint=hint)
    return profile, lock, sha256_of(report_file)


def write_report(report: VerifyReport, path: Path) -> None:
    atomic.write_text(path, json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")


def render(report: VerifyReport, verbose: bool = False) -> str:
    lines = [
        f"verify {report.profile}: lock {report.lock_sha256[:12]}, {report.distributions} distributions, "
        f"{report.platform} / Python {report.python}, base {report.base}"
    ]
    if report.sdist_only:
        lines.append(f"  sdist only (built into wheels before the image build): {', '.join(report.sdist_only)}")
    for name, sha in report.built:
        lines.append(f"  {name}: the wheel built here from its locked sdist (sha256 {sha[:16]}), checked as a wheel")
    if report.metadata:
        lines.append(f"metadata: FAIL, {len(report.metadata)} violation(s)")
        lines += [f"  - {v.render()}" for v in report.metadata]
    else:
        lines.append("metadata: OK (every Requires-Dist satisfied by the lock; verl's vLLM gate respected)")
    for violation, why in report.overridden:
        lines.append(f"  overridden by the profile: {violation.render()} - {why}")
    lines += _render_elf(report, verbose)
    for error in report.errors:
        lines.append(f"  FAIL  {error.owner}  {error.path}: {error.error}")
    lines.append("result: " + ("PASS" if report.ok else "FAIL"))
    return "\n".join(lines)


def _render_elf(report: VerifyReport, verbose: bool) -> list[str]:
    if report.torch is None:
        return ["elf: no torch in the lock; nothing links libtorch"]
    bad = [v for v in report.objects if not v.ok]
    excused = [v for v in report.objects if v.excused]
    tried = f"; in place of the lock's {report.torch.locked}" if report.torch.locked else ""
    lines = [
        f"elf: torch {report.torch.version} ({report.torch.abi} ABI{tried}); {len(report.objects)} extension(s) link "
        f"it, {len(bad)} failing, {len(excused)} excused (alternative builds not used here, or waived by the profile)"
    ]
    for verdict in report.objects:
        if verdict.ok and not verbose:
            continue
        state = "FAIL" if not verdict.ok else "SKIP" if verdict.excused else "OK  "
        lines.append(
            f"  {state}  {verdict.owner}  {verdict.path}  ({verdict.checked_symbols} torch symbols, {verdict.abi})"
        )
        if verdict.excused:
            lines.append(f"        {verdict.excused}")
            continue
        for finding in verdict.findings:
            lines.append(f"        {finding.kind}: {finding.message}")
            lines += [f"          {example}" for example in finding.examples]
            lines.append(f"        fix: {finding.fix}")
    if not bad and not verbose and report.objects:
        lines.append("  all OK (-v lists each, with the alternative builds that are not used here)")
    return lines
