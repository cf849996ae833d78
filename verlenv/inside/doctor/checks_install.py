"""Checks of what is installed: Python, drift from the image manifest, requirements, vLLM pins."""

from __future__ import annotations

import platform
import re
import sys

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verlenv.inside.doctor.model import Facts, Result, Status
from verlenv.profiles.knowledge import KNOWN_BAD_VLLM, verl_vllm_gate
from verlenv.verify.distmeta import exact_pin, extra_pin


def check_python(facts: Facts) -> Result:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    libc, libc_version = platform.libc_ver()
    summary = f"Python {platform.python_version()} on {platform.machine()} ({libc} {libc_version})"
    wanted = facts.manifest.components.get("python") if facts.manifest else None
    if wanted and wanted != here:
        return Result(
            Status.FAIL,
            f"{summary}; the image was built for Python {wanted}",
            fix="run inside the image's own interpreter (/opt/venv/bin/python)",
        )
    return Result(Status.OK, summary)


def check_manifest(facts: Facts) -> Result:
    manifest = facts.manifest
    if manifest is None:
        return Result(
            Status.SKIP, "no image manifest here (not a verlenv image)", fix="set VERLENV_MANIFEST to compare"
        )
    built, now = manifest.distributions, facts.dists
    changed = sorted(f"{n} {built[n]} -> {now[n]}" for n in built.keys() & now.keys() if built[n] != now[n])
    removed = sorted(f"{n} {built[n]}" for n in built.keys() - now.keys())
    added = sorted(f"{n} {now[n]}" for n in now.keys() - built.keys())
    other = sorted(
        f"{n} {r['version']} (the lock has {r['locked']})"
        for n, r in manifest.reused.items()
        if _base(r["version"]) != _base(r["locked"])
    )
    details = [
        *(f"changed: {c}" for c in changed),
        *(f"removed: {r}" for r in removed),
        *(f"added: {a}" for a in added),
        *(f"reused at another version: {o}" for o in other),
    ]
    head = f"profile {manifest.profile}, lock {manifest.lock_sha256[:12]}"
    if changed or removed:
        return Result(
            Status.FAIL,
            f"{head}: {len(changed)} changed, {len(removed)} removed, {len(added)} added since the build",
            tuple(details),
            fix="pull the image again, or rebuild it from a new lock instead of pip-installing in place",
        )
    if added or other:
        return Result(
            Status.WARN,
            f"{head}: {len(added)} added since the build, {len(other)} reused at another version than locked",
            tuple(details),
            fix="add them to the profile and rebuild, so the image stays reproducible",
        )
    return Result(Status.OK, f"{head}: {len(built)} distributions exactly as built")


def check_requirements(facts: Facts) -> Result:
    """pip check, from installed metadata only (no pip needed, nothing imported)."""
    dists = facts.installed
    env = default_environment()
    omitted = facts.manifest.omitted if facts.manifest else {}
    overrides = facts.manifest.overrides if facts.manifest else {}
    problems, left_out, overridden = [], [], []
    for name, dist in sorted(dists.items()):
        for text in dist.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            dep = dists.get(canonicalize_name(req.name))
            if dep is None and canonicalize_name(req.name) in omitted:
                left_out.append(f"{name} {dist.version} requires {req}, left out of this environment on purpose")
            elif dep is None:
                problems.append(f"{name} {dist.version} requires {req}, which is not installed")
            elif req.specifier.contains(dep.version, prereleases=True):
                continue
            elif canonicalize_name(req.name) in overrides:
                why = overrides[canonicalize_name(req.name)]
                overridden.append(f"{name} {dist.version} requires {req}, {dep.version} is installed: {why}")
            else:
                problems.append(f"{name} {dist.version} requires {req}, but {dep.version} is installed")
    if problems:
        return Result(
            Status.FAIL,
            f"{len(problems)} unmet requirement(s)",
            tuple(problems),
            fix="reinstall the listed packages at the versions they require (or rebuild the image)",
        )
    if left_out or overridden:
        parts = [f"{len(left_out)} requirement(s) on {len(omitted)} distribution(s) omitted when this venv was made"]
        parts = parts if left_out else []
        if overridden:
            parts.append(f"{len(overridden)} pin(s) overridden by the profile")
        return Result(
            Status.WARN,
            "; ".join(parts),
            tuple(left_out + overridden),
            fix="what an omitted package serves fails here (make the venv without --omit to have it); "
            "an override is the profile's documented choice (see its [[overrides]])",
        )
    return Result(Status.OK, f"all requirements of {len(dists)} distributions are met")


def check_vllm_gate(facts: Facts) -> Result:
    verl, vllm = facts.dists.get("verl"), facts.dists.get("vllm")
    if not vllm:
        return Result(Status.SKIP, "vLLM is not installed")
    if KNOWN_BAD_VLLM.contains(vllm, prereleases=True):
        return Result(
            Status.FAIL,
            f"vLLM {vllm} is in the 0.7.x line verl warns against",
            ("host memory grows every step with n>1 (vllm#15597, fixed by vllm PR #14326)",),
            fix="use vLLM >= 0.8.3 (verl: 'Please avoid vllm 0.7.x')",
        )
    gate = verl_vllm_gate(verl) if verl else None
    if gate is not None and not gate.contains(vllm, prereleases=True):
        return Result(
            Status.FAIL,
            f"verl {verl} refuses vLLM {vllm} at start-up (needs vllm{gate})",
            fix=f"install a vLLM in {gate}",
        )
    return Result(Status.OK, f"vLLM {vllm} is accepted by verl {verl or '(not installed)'}")


def _version_file(facts: Facts, package: str) -> str:
    """__version__ as written in PACKAGE/version.py or _version.py, read without importing."""
    dist = facts.installed.get(package)
    site = dist.path.parent if dist else facts.site  # a reused package lives in another site-packages
    for rel in ("_version.py", "version.py"):
        path = site / package / rel
        if path.exists():
            match = re.search(
                r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""",
                path.read_text(errors="replace"),
                re.M,
            )
            if match:
                return match.group(1)
    return ""


ENGINES = ("vllm", "sglang")  # rollout engines that pin torch== exactly and ship compiled code for it


def check_version_illusion(facts: Facts) -> Result:
    """Each engine's torch pin vs installed torch, and what the files say vs what the metadata says."""
    dists = facts.installed
    torch = dists.get("torch")
    if torch is None:
        return Result(Status.FAIL, "torch is not installed", fix="install the profile's torch")
    details, problems = [], []
    torch_file = _version_file(facts, "torch")
    details.append(f"torch: dist-info {torch.version}, torch/version.py {torch_file or '?'}")
    if torch_file and _base(torch_file) != _base(str(torch.version)):
        problems.append(f"torch's files say {torch_file} but its metadata says {torch.version} (half-upgraded?)")
    engines = [(name, dists[name]) for name in ENGINES if name in dists]
    for name, engine in engines:
        engine_file = _version_file(facts, name)
        details.append(f"{name}: dist-info {engine.version}, {name}/version file {engine_file or '?'}")
        if engine_file and _base(engine_file) != _base(str(engine.version)):
            problems.append(f"{name}'s files say {engine_file} but its metadata says {engine.version}")
        pin = exact_pin(engine.requires)
        if pin and _base(pin) != _base(str(torch.version)):
            problems.append(f"{name} {engine.version} was built for torch {pin}; torch {torch.version} is installed")
    if problems:
        return Result(
            Status.FAIL,
            problems[0],
            tuple(details + problems[1:]),
            fix="reinstall the engine and torch together at the versions the lock pins (the engine's torch== pin)",
        )
    built = "".join(f", {name} {engine.version} built for it" for name, engine in engines)
    return Result(Status.OK, f"torch {torch.version}{built}", tuple(details))


def check_sglang_pin(facts: Facts) -> Result:
    """SGLang vs the version the installed verl's [sglang] extra pins (read from verl's own metadata)."""
    sglang, verl = facts.installed.get("sglang"), facts.installed.get("verl")
    if sglang is None:
        return Result(Status.SKIP, "SGLang is not installed")
    if verl is None:
        return Result(Status.OK, f"SGLang {sglang.version} (verl is not installed)")
    wanted = extra_pin(verl.requires, "sglang", "sglang")
    if not wanted:
        return Result(Status.WARN, f"verl {verl.version} declares no [sglang] pin; SGLang {sglang.version} is untested")
    if _base(wanted) != _base(sglang.version):
        return Result(
            Status.FAIL,
            f"verl {verl.version}'s [sglang] extra pins sglang=={wanted}; SGLang {sglang.version} is installed",
            fix=f"install sglang=={wanted} (a profile of verl {verl.version} with SGLang), or the verl that pins "
            f"{sglang.version}",
        )
    return Result(Status.OK, f"SGLang {sglang.version} is the one verl {verl.version}'s [sglang] extra pins")


def check_engines(facts: Facts) -> Result:
    """Both engines in one environment: fine only if they were built for the same torch."""
    present = {name: facts.installed[name] for name in ENGINES if name in facts.installed}
    if len(present) < 2:
        return Result(Status.SKIP, f"one rollout engine here ({', '.join(present) or 'none'})")
    pins = {name: exact_pin(dist.requires) for name, dist in present.items()}
    text = ", ".join(f"{n} {d.version} (torch=={pins[n] or '?'})" for n, d in present.items())
    if len({_base(p) for p in pins.values() if p}) > 1:
        return Result(
            Status.WARN,
            f"vLLM and SGLang want different torch versions: {text}; at most one of them can match",
            fix="keep one engine per environment (one profile per engine), or versions built for the same torch",
        )
    return Result(Status.OK, f"both engines, built for the same torch: {text}")


def _base(version: str) -> str:
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def check_config(facts: Facts) -> Result:
    """The verl config lint (lint-config) against the verl installed here, when --config is given."""
    if not facts.config:
        return Result(Status.SKIP, "no --config given")
    from verlenv.inside.configlint.kernels import in_paths
    from verlenv.inside.configlint.rules import lint
    from verlenv.inside.configlint.schema import load_schema
    from verlenv.inside.configlint.source import collect

    schema = load_schema()
    # the kernels of the site doctor inspects (--site), with what a venv lends from another interpreter
    sites = [str(facts.site), *sorted({str(s) for s in facts.lent.values()})]
    kernels = in_paths(sites, f"this environment ({facts.site})")
    findings = lint(schema, collect(facts.config), installed=True, kernels=kernels)
    details = tuple(f"{f.severity}: {f.location}: {f.message} (fix: {f.fix})" for f in findings)
    errors = sum(f.severity == "error" for f in findings)
    if errors:
        return Result(
            Status.FAIL,
            f"{errors} error(s) in the verl config (verl {schema.version})",
            details,
            fix="see `verlenv lint-config` for each finding's fix",
        )
    if findings:
        return Result(Status.WARN, f"{len(findings)} warning(s) in the verl config (verl {schema.version})", details)
    return Result(Status.OK, f"the verl config matches verl {schema.version}'s schema")
