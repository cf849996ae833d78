"""The lock stage: resolve a profile with uv into lockfiles/NAME.lock, and check staleness offline."""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from verlenv import atomic
from verlenv.errors import CheckFailed, ConfigError, ResolutionError
from verlenv.lock.lockfile import Lock, LockHeader, parse_lock, read_lock
from verlenv.lock.tools import pip_command, run, uv_binary, uv_version
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import Profile, load_profile


@dataclass(frozen=True)
class LockStatus:
    profile: str
    state: str  # "fresh" | "stale" | "missing" | "invalid"
    reason: str

    @property
    def ok(self) -> bool:
        return self.state == "fresh"


def resolve(profile: Profile, paths: ProjectPaths) -> Path:
    """Resolve ``profile`` and write its lock atomically; nothing is written on any failure."""
    uv = uv_binary()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verlenv-lock-") as tmp:
        work = Path(tmp)
        body = _compile(profile, uv, work) + _builds(profile)
    header = LockHeader(
        profile=profile.name,
        profile_sha256=profile.sha256(),
        uv_version=uv_version(uv),
        python=profile.python,
        platform=profile.platform,
        exclude_newer=profile.exclude_newer,
    )
    text = header.render() + body
    target = paths.lock(profile.name)
    try:
        lock = parse_lock(text, target)
    except ConfigError as exc:
        raise ResolutionError(
            f"uv produced an unusable lock for {profile.name}; nothing written.\n{exc.message}"
        ) from None
    _check_components(profile, lock, target)
    _check_build_requires(profile, lock, target)
    atomic.write_text(target, text)
    _progress(
        f"{profile.name}: {len(lock.dists)} distributions locked in {time.monotonic() - started:.1f}s -> {target}"
    )
    return target


def _compile(profile: Profile, uv: str, work: Path) -> str:
    (work / "requirements.in").write_text("".join(f"{r.spec}\n" for r in profile.requirements))
    cmd = [
        uv,
        "pip",
        "compile",
        "requirements.in",
        "--python-platform",
        profile.platform,
        "--python-version",
        profile.python,
        "--exclude-newer",
        profile.exclude_newer,
        "--generate-hashes",
        "--no-header",
        "--quiet",
        "--output-file",
        "out.txt",
    ]
    if profile.overrides:  # pins that beat what a dependency declares, each with its reason in the profile
        (work / "overrides.txt").write_text("".join(f"{o.spec}\n" for o in profile.overrides))
        cmd += ["--override", "overrides.txt"]
    for url in profile.sources.extra_index_urls:
        cmd += ["--extra-index-url", url]
    for link in profile.sources.find_links:
        cmd += ["--find-links", link]
    if profile.sources.pip_download:
        cmd += ["--find-links", str(_pip_download(profile, work / "downloads"))]
    _progress(
        f"{profile.name}: resolving with uv for {profile.platform}, Python {profile.python}, as of {profile.snapshot}"
    )
    run(cmd, what=f"uv pip compile for profile {profile.name}", cwd=work)
    return (work / "out.txt").read_text()


def _builds(profile: Profile) -> str:
    """The sdists the profile builds itself, locked by hash like everything else."""
    from verlenv.lock.index import sdist_of

    text = ""
    for build in profile.builds:
        sdist = sdist_of(build.name, build.version, profile.exclude_newer)
        _progress(f"{profile.name}: {build.pin} is built from {sdist.filename} (sha256 {sdist.sha256[:16]})")
        archs = ", ".join(f"sm_{a}" for a in build.cuda_archs)
        text += f"{build.pin} \\\n    --hash=sha256:{sdist.sha256}\n"
        text += f"    # built here from its sdist for {archs} ([[builds]])\n"
    return text


def _pip_download(profile: Profile, dest: Path) -> Path:
    """Fetch sources.pip_download with pip, so pip's own configuration says where from."""
    dest.mkdir()
    for spec in profile.sources.pip_download:
        _progress(f"{profile.name}: pip download {spec}")
        run(
            [*pip_command(), "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", str(dest), spec],
            what=f"pip download {spec}",
        )
    return dest


def _check_components(profile: Profile, lock_obj: Lock, target: Path) -> None:
    for name, wanted in profile.components:
        got = lock_obj.version_of(name)
        if got is None or Version(got) != Version(wanted):
            raise ResolutionError(
                f"profile {profile.name} promises {name} {wanted} but uv resolved {got or 'no ' + name}; "
                f"nothing written to {target}",
                hint="fix the requirements or the components table of the profile",
            )


def _check_build_requires(profile: Profile, lock_obj: Lock, target: Path) -> None:
    for build in profile.builds:
        # ninja: torch's BuildExtension compiles in parallel with it, and a killed build resumes. nvcc: a CUDA
        # build compiles with the lock's own (CUDA_HOME is the folder its wheel installs), never the host's
        compiler = ("nvidia-cuda-nvcc",) if build.cuda_archs else ()
        missing = [name for name in (*build.requires, "ninja", *compiler) if lock_obj.version_of(name) is None]
        if missing:
            raise ResolutionError(
                f"profile {profile.name} builds {build.pin}, which needs {', '.join(missing)}; the lock has none; "
                f"nothing written to {target}",
                hint=_CUDA12_HINT
                if "nvidia-cuda-nvcc" in missing and lock_obj.version_of("nvidia-cuda-runtime-cu12")
                else "add them to the profile's requirements (ninja builds in parallel and resumes a killed build; "
                "CUDA architectures need nvidia-cuda-nvcc, CUDA 13's pip toolkit, of the torch's CUDA minor)",
            )


# Checked 2026-12-07: nvidia-cuda-nvcc-cu12 12.0.140, 12.4.131, 12.8.93 and 12.9.86 hold bin/ptxas and
# libnvvm, no nvcc, cicc or cudafe++; and torch's cpp_extension refuses an nvcc of another CUDA major.
_CUDA12_HINT = (
    "this torch is built for CUDA 12, and no CUDA 12 compiler is on PyPI (nvidia-cuda-nvcc-cu12 ships only "
    "ptxas and libnvvm; nvidia-cuda-nvcc starts at 13.0): declare the build in a CUDA 13 profile, or leave "
    "the extension out of this one"
)


def check(paths: ProjectPaths, names: list[str]) -> list[LockStatus]:
    """Offline staleness check of each named profile's lock."""
    return [_status(paths, name) for name in names]


def require_fresh(paths: ProjectPaths, name: str, subject: str) -> None:
    """The gate every later stage passes first: CheckFailed unless the lock of ``name`` is fresh.

    ``subject`` starts the message, e.g. "refusing to build X: its lock" or "lock for X".
    """
    [status] = check(paths, [name])
    if not status.ok:
        raise CheckFailed(
            f"{subject} is {status.state} ({status.reason})",
            hint=f"verlenv lock --profile {name}, then verlenv verify --profile {name}",
        )


def _status(paths: ProjectPaths, name: str) -> LockStatus:
    profile = load_profile(paths, name)
    target = paths.lock(name)
    if not target.exists():
        return LockStatus(name, "missing", f"{target} does not exist")
    try:
        lock = read_lock(target)
    except ConfigError as exc:
        return LockStatus(name, "invalid", exc.message)
    if lock.header.profile != name:
        return LockStatus(name, "invalid", f"lock header names profile '{lock.header.profile}'")
    if lock.header.profile_sha256 != profile.sha256():
        return LockStatus(name, "stale", f"profile {profile.path.name} changed since the lock was made")
    for component, wanted in profile.components:
        got = lock.version_of(component)
        if got is None or Version(got) != Version(wanted):
            return LockStatus(name, "stale", f"lock has {component} {got}, profile promises {wanted}")
    return LockStatus(name, "fresh", f"{len(lock.dists)} distributions, all hashed")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
