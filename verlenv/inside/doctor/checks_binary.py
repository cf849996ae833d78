"""Checks of compiled code: the ELF ABI check, import probes, stale artifacts."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from verlenv.inside import elfcache
from verlenv.inside.doctor.model import Facts, Result, Status
from verlenv.verify.abi import ObjectVerdict, apply_waivers, variant_key
from verlenv.verify.basefacts import rootfs_facts

_NO_DRIVER = re.compile(r"libcuda\.so|libnvidia-ml|no CUDA-capable device|CUDA driver|found no NVIDIA driver", re.I)
# Modules that JIT-compile with nvcc and refuse to import without a CUDA toolkit: DeepGEMM asserts
# CUDA_HOME (or nvcc, or /usr/local/cuda) at import, with an empty AssertionError.
_NEEDS_TOOLKIT = frozenset({"deep_gemm"})


def cuda_toolkit() -> str:
    """Where a CUDA toolkit is, as DeepGEMM looks for it; '' when there is none."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(nvcc).resolve().parent.parent)
    return "/usr/local/cuda" if Path("/usr/local/cuda").exists() else ""


def check_elf(facts: Facts) -> Result:
    from verlenv.inside.envcheck import check_site

    if "torch" not in facts.dists:
        return Result(Status.SKIP, "torch is not installed: nothing links libtorch")
    system = rootfs_facts(facts.root)
    remembered = elfcache.load(facts.manifest_file) if facts.manifest_file else None
    report = check_site(facts.site, system, facts.lent, remembered)
    if facts.write_elf_cache and facts.manifest_file and report.items:
        elfcache.save(
            facts.manifest_file, report.keys, system, report.items, report.torch, report.verdicts, report.errors
        )
    if report.torch is None:
        return Result(Status.SKIP, "torch is not installed: nothing links libtorch")
    verdicts = tuple(apply_waivers(list(report.verdicts), facts.manifest.waivers.items() if facts.manifest else ()))
    bad = [v for v in verdicts if not v.ok]
    optional = host_library_variants(verdicts)
    scan = f"{report.read} shared object(s) read, {report.remembered} unchanged since the recorded scan"
    hard = [v for v in bad if v not in optional]
    details = [
        f"{v.owner} {v.path}: {f.kind}: {f.message}" + (f" e.g. {f.examples[0]}" if f.examples else "")
        for v in hard + [v for v in bad if v in optional]
        for f in v.findings
    ]
    details += [f"{e.owner} {e.path}: {e.error}" for e in report.errors]
    details.append(scan)
    if hard or report.errors:
        fix = next((f.fix for v in hard for f in v.findings), "reinstall the package that owns the unreadable file")
        return Result(
            Status.FAIL,
            f"{len(hard) + len(report.errors)} of {len(report.verdicts)} extension(s) linking "
            f"torch {report.torch.version} will not load",
            tuple(details),
            fix=fix,
        )
    if optional:
        owners = sorted({v.owner for v in optional})
        return Result(
            Status.WARN,
            f"{len(report.verdicts) - len(optional)} extension(s) match torch {report.torch.version}; "
            f"{', '.join(owners)} cannot load here: none of its builds finds its host libraries",
            tuple(details),
            fix="install one of the library versions its builds are made for (FFmpeg 4-8 for torchcodec: "
            "apt-get install ffmpeg), or leave it if you never use it",
        )
    waived = [
        f"waived by the profile: {v.owner} {v.path}: {v.excused}" for v in verdicts if v.excused.startswith("waived")
    ]
    return Result(
        Status.OK,
        f"{len(report.verdicts)} extension(s) match torch {report.torch.version} "
        f"({report.torch.abi} ABI, glibc {system.glibc})"
        + (f"; {len(waived)} waived by the profile" if waived else ""),
        (*waived, scan),
    )


def host_library_variants(verdicts: tuple[ObjectVerdict, ...]) -> list[ObjectVerdict]:
    """Failing objects of packages that ship one build per version of a host library (torchcodec: one
    per FFmpeg major) when every build fails only for want of that library: the host lacks it, so the
    feature is unavailable here; nothing is built against the wrong torch. A package with a single build
    missing a library, or any build missing a torch symbol, is not excused by this."""
    groups: dict[tuple[str, str], list[ObjectVerdict]] = {}
    for verdict in verdicts:
        groups.setdefault(variant_key(verdict), []).append(verdict)
    optional = []
    for members in groups.values():
        only_missing = all(f.kind == "missing-needed" for m in members for f in m.findings)
        if len(members) > 1 and only_missing and all(not m.ok for m in members):
            optional += members
    return optional


def check_imports(facts: Facts) -> Result:
    probe = facts.probe
    if "error" in probe:
        return Result(Status.FAIL, str(probe["error"]), fix="run `python -c 'import torch'` to see the full error")
    if probe.get("torch") is None:
        return Result(
            Status.FAIL,
            f"import torch fails: {probe.get('torch_error')}",
            fix="reinstall the profile's torch (the ELF check above names missing libraries)",
        )
    modules: dict[str, str] = probe.get("modules", {})  # type: ignore[assignment]
    failed = {m: e for m, e in modules.items() if e != "ok"}
    abi = {m: e for m, e in failed.items() if "undefined symbol" in e}
    driver = {m: e for m, e in failed.items() if m not in abi and _NO_DRIVER.search(e)}
    toolkit = {m: e for m, e in failed.items() if m in _NEEDS_TOOLKIT and m not in abi | driver and not cuda_toolkit()}
    other = {m: e for m, e in failed.items() if m not in abi and m not in driver and m not in toolkit}
    details = tuple(f"{m}: {e}" for m, e in sorted(failed.items()))
    if abi or other:
        kind = "undefined symbol (built against another torch)" if abi else "import error"
        return Result(
            Status.FAIL,
            f"{len(abi) + len(other)} compiled module(s) fail to import: {kind}",
            details,
            fix="reinstall the failing package built for the installed torch (see the ELF check)",
        )
    if driver or toolkit:
        return Result(Status.WARN, _absent(driver, toolkit), details, fix=_absent_fix(driver, toolkit))
    return Result(Status.OK, f"torch {probe['torch']['version']} and {len(modules)} compiled module(s) import")  # type: ignore[index]


def _absent(driver: dict[str, str], toolkit: dict[str, str]) -> str:
    parts = []
    if driver:
        parts.append(f"{len(driver)} module(s) need the NVIDIA driver, which is not present here")
    if toolkit:
        parts.append(f"{', '.join(sorted(toolkit))} needs a CUDA toolkit (CUDA_HOME) to JIT-compile, and there is none")
    return "; ".join(parts)


def _absent_fix(driver: dict[str, str], toolkit: dict[str, str]) -> str:
    fixes = []
    if driver:
        fixes.append("expected on a build host; on a GPU node run the container with --gpus all")
    if toolkit:
        fixes.append(
            "point CUDA_HOME at a CUDA toolkit of the wheels' CUDA version (mount one, or add the nvidia-cuda-nvcc "
            "wheel to the profile) where its kernels are used (SGLang's FP8 GEMMs)"
        )
    return "; ".join(fixes)


def check_stale(facts: Facts) -> Result:
    from verlenv.inside.clean import find_stale

    found = find_stale(facts.site, added=facts.manifest.added if facts.manifest else {})
    if not found:
        return Result(Status.OK, "no leftovers of other versions in site-packages")
    details = tuple(f"{s.kind}: {s.path}: {s.reason}" for s in found[:20])
    return Result(
        Status.WARN,
        f"{len(found)} stale artifact(s) in site-packages",
        details,
        fix="see `verlenv clean`; `verlenv clean --apply` removes them",
    )
