"""The same locked environment without Docker: a virtual environment installed from verified wheels.

Every wheel is installed offline with ``pip install --no-index --no-deps --require-hashes`` (pip
itself run from the lock's own pip wheel), verlenv's manifest is written to
``VENV/verlenv-manifest.json``, and `verlenv doctor` run with the venv's interpreter checks drift
against it exactly as in an image. Distributions that another interpreter already has at the
locked version (torch and the nvidia-* libraries on a GPU host) can be reused instead of installed:
they are linked into ``VENV/reused`` (one link per top-level entry of exactly those
distributions, put on sys.path by a .pth file) and recorded in the manifest as reused, with the
site-packages they live in, so doctor reads and ELF-checks them there.

A venv is not relocatable (scripts carry its absolute path), so it is made in place; on any
failure the half-made directory is removed again.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verlenv import __version__
from verlenv.errors import ConfigError, ResolutionError
from verlenv.image.context import group_layers, requirements_text, source_date_epoch
from verlenv.image.manifest import VENV_NAME, Manifest
from verlenv.image.ownwheel import verlenv_wheel
from verlenv.paths import ProjectPaths
from verlenv.verify.report import require_verified
from verlenv.wheels.cache import Cache
from verlenv.wheels.sdists import as_wheels
from verlenv.wheels.wheelhouse import HouseFile, fill, target_tags

REUSED_DIR = "reused"
REUSED_PTH = "verlenv-reused.pth"

# Run by the interpreter that lends packages: every distribution it sees, with its site-packages and
# the top-level entries its RECORD puts there (standard library only: it may be any Python >= 3.8).
_LIST_DISTRIBUTIONS = r"""
import json, os, sys, importlib.metadata as md
found = []
for dist in md.distributions():
    path = getattr(dist, "_path", None)
    if path is None or not path.name.endswith(".dist-info"):
        continue
    tops = {str(f).split("/")[0] for f in (dist.files or []) if not str(f).startswith("..")}
    tops.discard("__pycache__")
    tops.add(path.name)
    # the real site: a venv that lends what it was itself lent holds only links (VENV/reused)
    site = os.path.dirname(os.path.realpath(path))
    found.append({"name": dist.metadata["Name"], "version": dist.version, "site": site,
                  "tops": sorted(tops)})
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "dists": found}))
"""


@dataclass(frozen=True)
class EnvPlan:
    """What to install, wherever the wheels came from (the cache of a checkout, or a bundle)."""

    profile: str
    lock_sha256: str
    verify_sha256: str
    python: str  # X.Y the wheels are built for
    source_date_epoch: int
    components: dict[str, str]
    files: tuple[HouseFile, ...]  # every wheel to install, verlenv's own included
    locked: dict[str, str]  # every locked distribution -> version (files may leave some to reuse)
    layers: dict[str, list[str]] = field(default_factory=dict)
    built_from_sdist: dict[str, str] = field(default_factory=dict)
    omitted: dict[str, str] = field(default_factory=dict)  # locked, left out on purpose: never installed
    overrides: dict[str, str] = field(default_factory=dict)  # the profile's: name -> why
    waivers: dict[str, str] = field(default_factory=dict)  # the profile's ELF waivers: glob -> why


@dataclass(frozen=True)
class Reuse:
    """Take distributions matching ``patterns`` from ``interpreter`` when it has them at the locked version."""

    interpreter: str
    patterns: tuple[str, ...]
    required: tuple[str, ...] = ()  # names the plan has no wheel for: reusing them is not optional
    any_version: bool = False  # reuse even at another version (recorded; doctor warns)


@dataclass(frozen=True)
class Lent:
    name: str
    version: str  # as installed in the lending interpreter
    locked: str
    site: str
    tops: tuple[str, ...]


@dataclass(frozen=True)
class VenvResult:
    path: Path
    python: str
    manifest: Path
    installed: tuple[str, ...]
    reused: tuple[Lent, ...]
    seconds: float


def plan_from_profile(
    paths: ProjectPaths, name: str, cache: Cache, *, offline: bool = False, quiet: bool = False
) -> EnvPlan:
    """The plan for a profile of this checkout: its verified lock, wheels from the cache, verlenv built here."""
    profile, lock, verify_sha = require_verified(paths, name, f"refusing to make a venv of {name}")
    epoch = source_date_epoch(lock.header.exclude_newer)
    house = fill(profile, lock, cache, offline=offline, quiet=quiet)
    tags = target_tags(profile.python, profile.platform)
    files = as_wheels(list(house.files), cache, tags, profile.python, paths)
    files.append(verlenv_wheel(paths, cache, epoch))
    locked = {h for d in lock.dists for h in d.hashes}
    return EnvPlan(
        profile=profile.name,
        lock_sha256=lock.sha256,
        verify_sha256=verify_sha,
        python=profile.python,
        source_date_epoch=epoch,
        components={**dict(profile.components), "cuda": profile.cuda},
        files=tuple(files),
        locked={d.name: d.version for d in lock.dists},
        layers={layer: [h.name for h in items] for layer, items in group_layers(profile, files).items()},
        built_from_sdist={f.name: f.sha256 for f in files if f.sha256 not in locked and f.name != "verlenv"},
        overrides=profile.override_reasons,
        waivers=dict(profile.waivers),
    )


def make_venv(plan: EnvPlan, target: Path, python: str, reuse: Reuse | None = None, quiet: bool = False) -> VenvResult:
    """Create ``target`` with ``python`` and install ``plan`` into it; nothing is left on failure."""
    started = time.monotonic()
    _check_target(target)
    lent = _lent(plan, reuse, quiet) if reuse else ()
    lent_names = {item.name for item in lent}
    _check_complete(plan, lent_names)
    files = [f for f in plan.files if f.name not in lent_names]
    try:
        _say(f"creating {target} with {python}", quiet)
        _run([python, "-m", "venv", "--without-pip", str(target)], f"{python} -m venv")
        venv_python = str(target / "bin" / "python")
        _check_python(venv_python, plan.python)
        if lent:
            _link_lent(target, venv_python, lent)
        _install(venv_python, files, quiet)
        manifest = _write_manifest(plan, target, python, files, lent)
        _self_check(target, quiet)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    _say(f"{target}: {len(files)} installed, {len(lent)} reused, in {time.monotonic() - started:.0f}s", quiet)
    return VenvResult(target, venv_python, manifest, tuple(f.name for f in files), lent, time.monotonic() - started)


def _check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{target} exists and is not empty", hint="give a new directory; nothing was changed")


def _check_complete(plan: EnvPlan, lent: set[str]) -> None:
    have = {f.name for f in plan.files} | lent | set(plan.omitted)
    missing = sorted(n for n in plan.locked if n not in have)
    if missing:
        shown = ", ".join(f"{n} {plan.locked[n]}" for n in missing[:8])
        raise ConfigError(
            f"no wheel and nothing to reuse for {len(missing)} locked distribution(s): {shown}",
            hint="the bundle leaves them to the target: --reuse-from PYTHON, an interpreter that has them",
        )


def _check_python(venv_python: str, wanted: str) -> None:
    got = _run([venv_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], "python --version").strip()
    if got != wanted:
        raise ConfigError(
            f"the wheels are for Python {wanted}; this interpreter is Python {got}",
            hint=f"pass --python with a Python {wanted}, or bundle the profile for {got} (verlenv bundle --python)",
        )


def lending(interpreter: str) -> tuple[str, list[dict[str, Any]]]:
    """(Python X.Y, distributions) of the interpreter that lends packages."""
    data = json.loads(_run([interpreter, "-c", _LIST_DISTRIBUTIONS], f"listing the packages of {interpreter}"))
    return data["python"], data["dists"]


def _lent(plan: EnvPlan, reuse: Reuse, quiet: bool) -> tuple[Lent, ...]:
    _, dists = lending(reuse.interpreter)
    there: dict[str, dict[str, Any]] = {}
    for dist in dists:  # the first on its sys.path wins, as at import
        there.setdefault(canonicalize_name(dist["name"]), dist)
    # pip installs the venv, so the venv has its own: never lent, even by a pattern like '*'
    wanted = [n for n in plan.locked if n != "pip" and (matches(n, reuse.patterns) or n in reuse.required)]
    lent, wrong = [], []
    for name in sorted(wanted):
        found = there.get(name)
        if found is None:
            if name in reuse.required:
                wrong.append(f"{name} {plan.locked[name]}: not installed there")
            continue
        if not same_release(found["version"], plan.locked[name]) and not reuse.any_version:
            wrong.append(f"{name}: {found['version']} there, the lock has {plan.locked[name]}")
            continue
        lent.append(Lent(name, found["version"], plan.locked[name], found["site"], tuple(found["tops"])))
    if wrong:
        raise ConfigError(
            f"{reuse.interpreter} cannot lend {len(wrong)} distribution(s) at the locked version:\n  "
            + "\n  ".join(wrong),
            hint="reuse only what it has at the lock's versions (--reuse PATTERN), install them instead, "
            "or accept the difference knowingly (--reuse-any-version; doctor will keep warning)",
        )
    _say(f"reusing from {reuse.interpreter}: " + ", ".join(f"{x.name} {x.version}" for x in lent), quiet)
    return tuple(lent)


def matches(name: str, patterns: Iterable[str]) -> bool:
    """``name`` (canonical) matches a glob such as 'torch' or 'nvidia-*' (normalised the same way)."""
    return any(fnmatch.fnmatchcase(name, canonicalize_name(pattern)) for pattern in patterns)


def same_release(installed: str, locked: str) -> bool:
    """Same public version: torch 2.11.0+cu130 from the PyTorch index serves for the lock's 2.11.0."""
    try:
        return Version(installed).public == Version(locked).public
    except InvalidVersion:
        return installed == locked


def _site(venv_python: str) -> Path:
    return Path(
        _run([venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "purelib").strip()
    )


def _link_lent(target: Path, venv_python: str, lent: tuple[Lent, ...]) -> None:
    farm = target / REUSED_DIR
    farm.mkdir()
    for item in lent:
        for top in item.tops:
            link, source = farm / top, Path(item.site) / top
            if source.exists() and not link.exists():
                link.symlink_to(source)
    (_site(venv_python) / REUSED_PTH).write_text(f"{farm}\n")


def _install(venv_python: str, files: list[HouseFile], quiet: bool) -> None:
    pip = next((f for f in files if f.name == "pip"), None)
    if pip is None:
        raise ConfigError(
            "the lock has no pip wheel to install with", hint="lock pip in the profile, as every profile does"
        )
    with tempfile.TemporaryDirectory(prefix="verlenv-venv-") as tmp:
        house = Path(tmp)
        for item in files:
            (house / item.filename).symlink_to(item.path.resolve())
        requirements = house / "requirements.txt"
        requirements.write_text(requirements_text(tuple(files)))
        _say(f"installing {len(files)} wheels offline (--no-index --no-deps --require-hashes)", quiet)
        # pip runs from its own wheel: the venv has no pip until pip installs itself from the lock.
        options = ["--no-index", "--no-deps", "--require-hashes", "--no-compile", "--disable-pip-version-check"]
        options += ["--no-warn-script-location", "--quiet", "--find-links", str(house), "-r", str(requirements)]
        _run([venv_python, f"{pip.path.resolve()}/pip", "install", *options], "pip install")
    _say("byte-compiling", quiet)
    site = _site(venv_python)
    subprocess.run(
        [venv_python, "-m", "compileall", "-qq", "-j", "0", "--invalidation-mode", "unchecked-hash", str(site)],
        capture_output=True,
        check=False,  # like pip's own compile step: files for other Pythons may not compile
    )


def _write_manifest(plan: EnvPlan, target: Path, python: str, files: list[HouseFile], lent: tuple[Lent, ...]) -> Path:
    distributions = {f.name: f.version for f in files} | {x.name: x.version for x in lent}
    manifest = Manifest(
        profile=plan.profile,
        lock_sha256=plan.lock_sha256,
        verify_sha256=plan.verify_sha256,
        source_date_epoch=plan.source_date_epoch,
        components={**plan.components, "python": plan.python},
        distributions=dict(sorted(distributions.items())),
        layers=plan.layers,
        base={"name": "venv", "reference": python, "glibc": platform.libc_ver()[1]},
        verlenv_version=__version__,
        built_from_sdist=plan.built_from_sdist,
        kind="venv",
        reused={x.name: {"version": x.version, "locked": x.locked, "site": x.site, "tops": list(x.tops)} for x in lent},
        omitted=plan.omitted,
        overrides=plan.overrides,
        waivers=plan.waivers,
    )
    path = target / VENV_NAME
    path.write_text(manifest.to_json())
    return path


def _self_check(target: Path, quiet: bool) -> None:
    """doctor --static in the new venv, as the image build runs it; it records its ELF scan there, so the
    venv's own doctor later re-reads only what changed. Its verdict is reported, not enforced: a venv
    on a host without, say, FFmpeg is still the environment the user asked for."""
    proc = subprocess.run(
        [str(target / "bin" / "verlenv"), "doctor", "--static", "--write-elf-cache", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        summary = json.loads(proc.stdout)["summary"]
    except (ValueError, KeyError):
        _say(f"doctor --static did not report (exit {proc.returncode}): {proc.stderr.strip()[-300:]}", quiet)
        return
    _say("doctor --static: " + ", ".join(f"{n} {s}" for s, n in summary.items() if n), quiet)


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONNOUSERSITE": "1"})
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise ResolutionError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[venv] {message}", file=sys.stderr, flush=True)
