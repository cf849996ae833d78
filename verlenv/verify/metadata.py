"""Metadata check: every Requires-Dist of every locked distribution is satisfied by the lock.

Markers are evaluated for the profile's Python and platform; extras propagate: a requirement
``ray[default]`` makes ray's ``extra == "default"`` requirements count, transitively.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from verlenv.profiles.knowledge import KNOWN_BAD_VLLM, verl_vllm_gate
from verlenv.verify.distmeta import DistMeta


@dataclass(frozen=True)
class MetaViolation:
    dist: str
    requirement: str
    problem: str

    def render(self) -> str:
        return f"{self.dist} requires {self.requirement}: {self.problem}"


def marker_env(python: str, platform: str) -> dict[str, str]:
    arch = platform.split("-", 1)[0]
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "implementation_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": arch,
        "platform_release": "",
        "platform_version": "",
    }


def _applies(marker: Marker | None, env: dict[str, str], extras: set[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**env, "extra": extra}) for extra in extras | {""})


def check_requirements(
    metas: Mapping[str, DistMeta],
    roots: list[Requirement],
    python: str,
    platform: str,
    replaced: Mapping[str, str] | None = None,
) -> list[MetaViolation]:
    """Violations of every Requires-Dist reachable from ``roots``; ``replaced`` (dist -> the lock's version)
    names the distributions checked at another release than the locked one (verify --try)."""
    env = marker_env(python, platform)
    versions = {name: Version(meta.version) for name, meta in metas.items()}
    extras: dict[str, set[str]] = {name: set() for name in metas}
    violations: list[MetaViolation] = []
    queue: deque[tuple[str, Requirement]] = deque(("(profile)", r) for r in roots)
    seen: set[tuple[str, str]] = set()
    expanded: set[str] = set()
    while queue:
        source, req = queue.popleft()
        if (source, str(req)) in seen or not _applies(req.marker, env, extras.get(source, set())):
            continue
        seen.add((source, str(req)))
        name = canonicalize_name(req.name)
        if name not in versions:
            violations.append(MetaViolation(source, str(req), "not in the lock"))
            continue
        if not req.specifier.contains(versions[name], prereleases=True):
            violations.append(MetaViolation(source, str(req), _has(name, versions[name], replaced or {})))
        new_extras = {canonicalize_name(e) for e in req.extras} - extras[name]
        if new_extras or name not in expanded:  # (re)visit its requirements under the new extras
            extras[name] |= new_extras
            expanded.add(name)
            queue.extend((name, r) for r in _requirements(metas[name], violations))
    return violations


def _has(name: str, version: Version, replaced: Mapping[str, str]) -> str:
    if name in replaced:
        return f"{name} {version} is checked in place of the lock's {replaced[name]}"
    return f"the lock has {name} {version}"


def split_overridden(
    violations: list[MetaViolation], overrides: Mapping[str, str]
) -> tuple[list[MetaViolation], list[tuple[MetaViolation, str]]]:
    """(violations, (violation, why) of those a profile override answers): an override is the profile
    saying "this declared pin is wrong for this stack", so the violation it causes is reported, not failed."""
    real, overridden = [], []
    for violation in violations:
        try:
            name = canonicalize_name(Requirement(violation.requirement).name)
        except InvalidRequirement:
            name = ""
        if name in overrides:
            overridden.append((violation, overrides[name]))
        else:
            real.append(violation)
    return real, overridden


def _requirements(meta: DistMeta, violations: list[MetaViolation]) -> list[Requirement]:
    parsed = []
    for text in meta.requires_dist:
        try:
            parsed.append(Requirement(text))
        except InvalidRequirement:
            violations.append(MetaViolation(meta.name, text, "unparsable Requires-Dist"))
    return parsed


def check_engine_gate(versions: Mapping[str, str]) -> list[MetaViolation]:
    """verl's runtime vLLM gate and the known-bad vLLM 0.7.x line (field-notes §1c, §3 #1)."""
    verl, vllm = versions.get("verl"), versions.get("vllm")
    if not verl or not vllm:
        return []
    found = []
    gate = verl_vllm_gate(verl)
    if gate is not None and not gate.contains(vllm, prereleases=True):
        found.append(MetaViolation(f"verl {verl}", f"vllm{gate}", f"verl refuses vllm {vllm} at start-up"))
    if KNOWN_BAD_VLLM.contains(vllm, prereleases=True):
        found.append(
            MetaViolation(
                f"verl {verl}",
                "vllm outside 0.7.x",
                f"vllm {vllm} is in the 0.7.x line verl warns against (host-memory leak with n>1)",
            )
        )
    return found


def reachable(metas: Mapping[str, DistMeta], root: str, python: str, platform: str) -> set[str]:
    """Every distribution ``root`` needs at run time on the target, itself included (extras followed,
    markers evaluated; what the lock lacks is left out: check_requirements reports it)."""
    env = marker_env(python, platform)
    extras: dict[str, set[str]] = {name: set() for name in metas}
    found: set[str] = set()
    queue: deque[tuple[str, set[str]]] = deque([(canonicalize_name(root), set())])
    while queue:
        name, wanted = queue.popleft()
        if name not in metas or (name in found and wanted <= extras[name]):
            continue
        found.add(name)
        extras[name] |= wanted
        for req in _requirements(metas[name], []):
            if _applies(req.marker, env, extras[name]):
                queue.append((canonicalize_name(req.name), {canonicalize_name(e) for e in req.extras}))
    return found
