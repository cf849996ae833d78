"""Compiled extensions built from their locked sdists (flash-attn), hermetically, against the profile's own torch,
nvcc and compilers. The build runs in a container of the profile's own lower layers (base with gcc and Python.h,
venv, torch, torch-extras with the locked nvcc, deps with setuptools and ninja) with no network, `pip wheel
--no-build-isolation` over the extracted sdist, SOURCE_DATE_EPOCH set. Its build folder is kept in the cache
under the hash of every input, so a killed build resumes from its object files (ninja skips what is done);
progress is ninja's "[N/M]"; a failure names the first failing file and its compiler error. Two compilers write
their process ID into CUDA objects: cudafe++ is handed a fixed one by a preloaded getpid (pidpin.c), and nvcc's,
in its temp-file names, is zeroed (objnorm) before the library is linked again and the wheel kept. The wheel is
kept by that hash and recorded in lockfiles/NAME.builds.json with the sha256 of every file in it; a rebuild from
the same inputs that differs says which files do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from verlenv.errors import CheckFailed, IntegrityError
from verlenv.image import objnorm
from verlenv.profiles.profile import ExtensionBuild
from verlenv.wheels import builtrecord
from verlenv.wheels.builtrecord import BuiltWheel
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.wheelhouse import HouseFile

RECIPE_VERSION = 3  # 2: objects normalized (objnorm) and linked again; 3: cudafe++'s PID pinned (pidpin.c)
PIDPIN = Path(__file__).with_name("pidpin.c")
PIDPIN_SO = "/tmp/verlenv-pidpin.so"  # in the container, outside the cached build folder
NVCC_THREADS = "1"  # it lands in every compile command: fixed, so the same inputs give the same build
_KILLED = {137: "SIGKILL: out of memory, or `docker kill`", 143: "SIGTERM: `docker stop`"}
_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")
_FAILED = re.compile(r"^\s*FAILED: (?:\[code=\d+\] )?(\S+)")
_SOURCE = re.compile(r" -c (?:-c )?(\S+\.(?:cu|cpp|cc|c))\b")
_COMPILER_ERROR = re.compile(
    r"^\s*(\S+\.(?:cu|cuh|cpp|cc|c|h|hpp))\(?:?(\d+)[,:)]+(?:\d+:)?\s*(?:fatal )?error\b:?\s*(.*)$"
)


@dataclass(frozen=True)
class BuildEnv:
    """The container a build runs in: an image of the profile's lower layers, and what they are."""

    image_id: str
    env: dict[str, str]
    inputs: dict[str, str]  # layer DiffIDs and tool versions: part of the key


def key_of(build: ExtensionBuild, sdist: HouseFile, env: BuildEnv) -> str:
    blob = {"v": RECIPE_VERSION, "build": build.inputs(), "sdist": sdist.sha256, "env": env.inputs}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def jobs() -> int:
    """As many compile jobs as the cores allow and memory holds (~4 GiB each with one nvcc thread)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(os.cpu_count() or 1, int(memory // 4)))


def built_wheel(
    client, build: ExtensionBuild, sdist: HouseFile, env: BuildEnv, cache: Cache, record_file: Path, quiet: bool
) -> HouseFile:  # type: ignore[no-untyped-def]
    """The wheel of ``build``: from the cache when these inputs were built before, else built now."""
    found = cached_wheel(build, sdist, env, cache)
    if found is not None:
        return found
    key = key_of(build, sdist, env)
    wheel, seconds, used = _build(client, build, sdist, env, cache, key, quiet)
    return _keep(_describe(build, sdist, env, key, wheel, seconds, used), wheel, cache, record_file)


def adopt(build: ExtensionBuild, sdist: HouseFile, env: BuildEnv, cache: Cache, record_file: Path, wheel: Path) -> str:
    """Keep a wheel of ``build`` made elsewhere from the same recipe (in the image's tree on a host with
    more cores) as if built here: checked against the record of these inputs, which it must match, or
    recorded when there is none. Says which."""
    key = key_of(build, sdist, env)
    recorded = builtrecord.read(record_file).get(build.name)
    described = _describe(build, sdist, env, key, wheel, 0.0, 0)
    if recorded and recorded.key == key:  # keep the record's own build time and job count
        described = replace(described, seconds=recorded.seconds, jobs=recorded.jobs)
    try:
        _keep(described, wheel, cache, record_file)
    except IntegrityError as exc:
        raise IntegrityError(
            f"{wheel}: {exc.message}",
            hint="it was not built as these inputs build it: build it here (without --ext-wheel), or rebuild it "
            "there from benchmarks/ext_recipe.py's recipe",
        ) from None
    return "matches the record" if described == recorded else "recorded (no record of these inputs before)"


def _keep(result: BuiltWheel, wheel: Path, cache: Cache, record_file: Path) -> HouseFile:
    """Check ``wheel`` against the record of its inputs, keep it in the cache by its key (and by its
    sha256, where verify finds it) and record it. A wheel that differs from the record keeps nothing."""
    recorded = builtrecord.read(record_file).get(result.name)
    if recorded and recorded.key == result.key and recorded.wheel_sha256 != result.wheel_sha256:
        raise IntegrityError(_differences(recorded, result), hint="the same inputs must give the same wheel")
    folder = cache.root / "built-ext" / result.key
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / result.wheel
    _copy(wheel, cache).replace(target)  # a copy: an adopted wheel stays where it was given
    stored = cache.store(_copy(target, cache), result.wheel_sha256, target.name)
    if recorded != result:
        records = builtrecord.read(record_file)
        records[result.name] = result
        builtrecord.write(record_file, records)
    return HouseFile(result.name, result.version, target.name, result.wheel_sha256, stored)


def cached_wheel(build: ExtensionBuild, sdist: HouseFile, env: BuildEnv, cache: Cache) -> HouseFile | None:
    """The wheel built before from exactly these inputs, if the cache has it (no image needed)."""
    found = sorted((cache.root / "built-ext" / key_of(build, sdist, env)).glob("*.whl"))
    if not found:
        return None
    return HouseFile(build.name, build.version, found[0].name, sha256_of(found[0]), found[0])


def _copy(path: Path, cache: Cache) -> Path:
    staged = cache.tmp / f".{path.name}.{os.getpid()}"
    shutil.copyfile(path, staged)
    return staged


def _workdir(cache: Cache, build: ExtensionBuild, key: str) -> Path:
    """The build folder kept across runs; a pending one (started by hand for the same build) is adopted."""
    folder = cache.root / "extbuild" / key
    pending = cache.root / "extbuild" / f"pending-{build.name}-{build.version}"
    if not folder.exists() and pending.is_dir():
        pending.rename(folder)
    (folder / "out").mkdir(parents=True, exist_ok=True)
    return folder


def _extract(sdist: HouseFile, folder: Path) -> str:
    """Extract once: a second extraction would give every source a new mtime and rebuild everything."""
    with tarfile.open(sdist.path) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        if not (folder / "src" / ".extracted").exists():
            tar.extractall(folder / "src", filter="data")
            (folder / "src" / ".extracted").touch()
    return top


def _build(
    client, build: ExtensionBuild, sdist: HouseFile, env: BuildEnv, cache: Cache, key: str, quiet: bool
) -> tuple[Path, float, int]:  # type: ignore[no-untyped-def]
    folder = _workdir(cache, build, key)
    top = _extract(sdist, folder)
    for stale in (folder / "out").glob("*.whl"):
        stale.unlink()
    used = jobs()
    command, variables = recipe(build, env.env, top, used)
    archs = ", ".join("sm_" + a for a in build.cuda_archs) or "the CPU (C++ only)"
    _say(f"{build.pin}: building for {archs} with {used} job(s)", quiet)
    started = time.monotonic()
    container = client.containers.run(
        env.image_id,
        ["bash", "-c", command],
        detach=True,
        network_mode="none",
        volumes={str(folder): {"bind": "/build", "mode": "rw"}},
        environment=variables,
    )
    try:
        log = _follow(container, build, folder / "build.log", started, quiet)
        status = container.wait()
    finally:
        container.remove(force=True)
    wheels = sorted((folder / "out").glob("*.whl"))
    if status.get("StatusCode") != 0 or not wheels:
        raise CheckFailed(_failure(build, log, folder / "build.log", status.get("StatusCode", 0)))
    return wheels[0], time.monotonic() - started, used


def recipe(build: ExtensionBuild, image_env: dict[str, str], top: str, used: int) -> tuple[str, dict[str, str]]:
    """The command and environment of a build in /build of an image of the lower layers: the same
    wherever it runs (a container here, or the image's tree on a host with more cores), so its objects
    and wheel are the same too; only MAX_JOBS, which changes no output, differs."""
    variables = {
        **image_env,
        **dict(build.env),
        "SOURCE_DATE_EPOCH": image_env.get("SOURCE_DATE_EPOCH", "0"),
        "MAX_JOBS": str(used),
        "NVCC_THREADS": NVCC_THREADS,
    }
    if build.cuda_archs:
        variables["TORCH_CUDA_ARCH_LIST"] = ";".join(f"{a[:-1]}.{a[-1]}" for a in build.cuda_archs)
    wheel = "/opt/venv/bin/python -m pip wheel -v --no-build-isolation --no-deps --no-index -w /build/out ."
    # nvcc's PID sits in every CUDA object's symbol table: zero it, then link and pack again from the
    # same objects (ninja has nothing left to compile)
    normalize = f"/opt/venv/bin/python -c {shlex.quote(Path(objnorm.__file__).read_text())} build"
    relink = "rm -f /build/out/*.whl && find build -name '*.so' -delete"
    return f"cd /build/src/{top} && {pin_pid()} && {wheel} && {normalize} && {relink} && {wheel}", variables


def pin_pid() -> str:
    """Shell that compiles pidpin.c with the build environment's gcc and preloads it for the rest of
    the recipe, so cudafe++ writes the same internal-linkage names in every compile."""
    source = shlex.quote(PIDPIN.read_text())
    return f"printf '%s' {source} | gcc -shared -fPIC -O2 -x c -o {PIDPIN_SO} - && export LD_PRELOAD={PIDPIN_SO}"


def _follow(container, build: ExtensionBuild, log_path: Path, started: float, quiet: bool) -> list[str]:  # type: ignore[no-untyped-def]
    lines: list[str] = []
    buffer = ""
    last = 0.0
    with log_path.open("a", buffering=1) as log:  # line by line: people tail it during hours-long builds
        for chunk in container.logs(stream=True, follow=True):
            buffer += chunk.decode(errors="replace")
            *complete, buffer = buffer.split("\n")
            for line in complete:
                log.write(line + "\n")
                lines.append(line)
                match = _PROGRESS.match(line)
                if match and not quiet and time.monotonic() - last > 10:
                    last = time.monotonic()
                    _progress(build, int(match.group(1)), int(match.group(2)), time.monotonic() - started)
    return lines


def _progress(build: ExtensionBuild, done: int, total: int, elapsed: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    left = elapsed / max(done, 1) * (total - done)
    print(
        f"[build-ext] {build.name} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} files, "
        f"{elapsed / 60:.0f} min, ~{left / 60:.0f} min left (a killed build resumes from its objects)",
        file=sys.stderr,
        flush=True,
    )


def _failure(build: ExtensionBuild, lines: list[str], log_path: Path, status: int = 1) -> str:
    """The first failing file and its first compiler error, not 10,000 lines of nvcc; or, when the
    container itself was killed, that (its log's last lines are then only warnings)."""
    first = _first_error(lines)
    if first:
        return f"building {build.pin} failed at {first[0]}:\n  {first[1]}\nfull log: {log_path}"
    if status in _KILLED:
        return (
            f"building {build.pin} stopped: its container was killed ({_KILLED[status]}); the objects compiled "
            f"so far are kept and the next build resumes from them\nfull log: {log_path}"
        )
    tail = "\n".join(line for line in lines[-15:] if line.strip())
    return f"building {build.pin} failed:\n{tail}\nfull log: {log_path}"


def _first_error(lines: list[str]) -> tuple[str, str] | None:
    """(source file, error line): ninja's first FAILED step, else the first `file:line: error` a compiler wrote."""
    for index, line in enumerate(lines):
        if _FAILED.match(line):
            window = lines[index : index + 300]
            source = next((m.group(1) for w in window if (m := _SOURCE.search(w))), _FAILED.match(line).group(1))  # type: ignore[union-attr]
            found = next((m for w in window if (m := _COMPILER_ERROR.match(w))), None)
            error = found.group(0).strip() if found else next((w.strip() for w in window[1:] if "error" in w), "")
            return source, error
    for line in lines:
        match = _COMPILER_ERROR.match(line)
        if match:
            return match.group(1), line.strip()
    return None


def _describe(
    build: ExtensionBuild, sdist: HouseFile, env: BuildEnv, key: str, wheel: Path, seconds: float, used: int
) -> BuiltWheel:
    return BuiltWheel(
        name=build.name,
        version=build.version,
        sdist_sha256=sdist.sha256,
        key=key,
        wheel=wheel.name,
        wheel_sha256=sha256_of(wheel),
        cuda_archs=list(build.cuda_archs),
        env=build.flags,
        inputs=env.inputs,
        files=wheel_files(wheel),
        seconds=round(seconds, 1),
        jobs=used,
    )


def wheel_files(wheel: Path) -> dict[str, str]:
    """path -> sha256 (hex) of every file in the wheel, from its RECORD."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        found = {}
        for line in archive.read(record).decode().splitlines():
            path, digest, _ = [*line.rsplit(",", 2), "", ""][:3]
            if digest.startswith("sha256="):
                raw = digest.removeprefix("sha256=")
                found[path] = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
    return found


def _differences(before: BuiltWheel, after: BuiltWheel) -> str:
    changed = sorted(p for p in before.files.keys() | after.files.keys() if before.files.get(p) != after.files.get(p))
    lines = [
        f"{after.name} {after.version} built from the same inputs came out as {after.wheel_sha256[:16]}, "
        f"the record says {before.wheel_sha256[:16]}; files that differ:"
    ]
    lines += [f"  {p}" for p in changed[:20]] or ["  none: the archive itself differs (order or timestamps)"]
    return "\n".join(lines)


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[build-ext] {message}", file=sys.stderr, flush=True)
