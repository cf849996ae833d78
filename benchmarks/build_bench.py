"""Cold build of a profile against its floor, then a rebuild after a change to verlenv only, as ratios.

    python benchmarks/build_bench.py [--profile NAME] [--second-engine DIR]

Floor: what any builder must do with the same wheels, measured here in the same run: unpack every
wheel with Python's zipfile on all cores and hash the unpacked tree. Cold: every layer installed
and written again (`--no-cache`) and loaded into an engine that holds none of them (a second
dockerd with its own data root under DIR when given; otherwise the profile's images are removed
from the engine first). The Debian base layer and built extension wheels are reused (made once per
machine and cached; their own times are in benchmarks/README.md). Rebuild: a copy of the project
whose verlenv source differs by one comment line, right after the cold build and twice more.
Bytecode: the floor's tree compiled as the build compiles it, printed beside the floor (an image
with .pyc files needs that work too).
Targets: rebuild / cold <= 0.05; cold / floor <= 3.

    python benchmarks/build_bench.py --profile NAME --without-builds DIR

makes DIR a copy of the project whose profile declares no [[builds]] (locked and verified for real)
and stops: a stand-in for a profile whose built extension wheel this machine lacks. Build it once
there (`verlenv build --profile NAME`, which also writes its image record), then run this script
from DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.variants import copy_project, without_builds
from tests.integration.test_reproducible import second_engine
from verlenv.image.build import BuildOptions, _wheels, build_image, image_repository
from verlenv.image.services import ensure_engine
from verlenv.lock.lockfile import read_lock
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache, default_root


def _unpack(job: tuple[str, str]) -> int:
    wheel, where = job
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(where)
    return 0


def _hash_tree(root: Path) -> int:
    count = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            hashlib.sha256(path.read_bytes()).hexdigest()
            count += 1
    return count


def _children_cpu() -> float:
    """Core-seconds of this process's waited-for children so far (the unpack pool, compileall)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def bytecode(scratch: Path) -> tuple[float, int]:
    """(s, .py files) to compile the unpacked tree as the build does (all cores, hash-checked .pyc):
    work any image with bytecode needs on top of the floor, so the floor alone understates it."""
    sources = sum(1 for _ in scratch.rglob("*.py"))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "compileall", "-qq", "-j", "0", "--invalidation-mode", "unchecked-hash", str(scratch)],
        env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONWARNINGS": "ignore"}, stdout=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    return time.perf_counter() - started, sources


def floor(wheels: list[Path], scratch: Path) -> tuple[float, float, int, int]:
    """(unpack s, hash s, files, bytes) for every wheel unpacked with zipfile on all cores."""
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(_unpack, [(str(w), str(scratch / w.name)) for w in wheels]))
    unpacked = time.perf_counter() - started
    started = time.perf_counter()
    files = _hash_tree(scratch)
    hashed = time.perf_counter() - started
    size = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file() and not p.is_symlink())
    return unpacked, hashed, files, size


def _build(paths, profile: str, cache: Cache, nocache: bool):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    options = BuildOptions(quiet=not nocache, nocache=nocache, record=False)  # the cold build says where time goes
    result = build_image(paths, profile, cache, options)
    return result, time.perf_counter() - started


def _rebuild(paths, profile: str, cache: Cache, marker: str):  # type: ignore[no-untyped-def]
    """A build from a copy of the project whose verlenv sources differ by one comment."""
    with tempfile.TemporaryDirectory() as tmp:
        top = copy_project(paths, Path(tmp) / "top")
        init = top.root / "verlenv" / "__init__.py"
        init.write_text(init.read_text() + f"# benchmark: {marker}\n")
        return _build(top, profile, cache, nocache=False)


@contextlib.contextmanager
def _tags_kept(profile: str, lock_sha: str):  # type: ignore[no-untyped-def]
    """The profile's tags back on the images they named before: the rebuilds are of a changed copy of
    verlenv, and `docker run verlenv/NAME:latest` afterwards must not start one of them."""
    client = ensure_engine()
    tags = [f"{image_repository(profile)}:{lock_sha[:12]}", f"{image_repository(profile)}:latest"]
    before = {tag: _image_id(client, tag) for tag in tags}
    images = {summary["Id"] for summary in client.api.images(all=True)}
    try:
        yield
    finally:
        for tag, image_id in before.items():
            repo, _, name = tag.rpartition(":")
            if image_id and _image_id(client, image_id):  # a cold build without --second-engine removed it
                client.api.tag(image_id, repo, name)
            elif _image_id(client, tag):
                client.images.remove(tag, noprune=True)
        # the run's own images (the cold build, the rebuilds), untagged now: each would keep its layers
        for summary in client.api.images(all=True):
            if summary["Id"] not in images and not _tags(summary):
                client.images.remove(summary["Id"], force=True)


def _make_room(paths, profile: str) -> None:  # type: ignore[no-untyped-def]
    """A cold load needs an engine holding none of the image's layers above the base: the profile's own
    images go (as documented); any other image holding them (a dangling rebuild, an extension's build
    environment, a profile sharing the torch layer) stops the run, or the load would skip them and the
    figure would not be a cold one (2026-12-07: 113 s, load 0.3 s, with such images present)."""
    from verlenv.image import expected, oci
    from verlenv.image.build import record_path

    record = expected.read(record_path(paths, profile))
    if record is None:
        raise SystemExit(f"no lockfiles/{profile}.image.json to tell this image's layers: pass --second-engine DIR")
    client = ensure_engine()
    for image in client.images.list(name=image_repository(profile)):
        client.images.remove(image.id, force=True)
    ours = set(oci.chain_ids([layer.diff_id for layer in record.layers])[1:])  # the base's own chain may stay
    holders = []
    for summary in client.api.images(all=True):
        layers = client.api.inspect_image(summary["Id"]).get("RootFS", {}).get("Layers") or []
        if ours & set(oci.chain_ids(layers)):
            holders.append(f"{summary['Id'][:19]} {','.join(_tags(summary)) or '<none>'}")
    if holders:
        raise SystemExit(
            "not a cold engine: these images hold layers of the image, so a load would skip them:\n  "
            + "\n  ".join(holders)
            + "\nremove them, or pass --second-engine DIR"
        )


def _tags(summary: dict) -> list[str]:  # type: ignore[type-arg]
    return [tag for tag in summary.get("RepoTags") or [] if tag != "<none>:<none>"]


def _image_id(client, tag: str) -> str:  # type: ignore[no-untyped-def]
    import docker

    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound:
        return ""


def _cpu(since: dict[str, float] | None = None) -> dict[str, float]:
    """Core-seconds so far: the whole machine (/proc/stat), this process (verlenv's own work: reading
    trees back into tars, hashing), and the engines' daemons (dockerd and containerd, untarring and
    hashing loaded layers); the rest is the containers' pip, compileall and self-check. Minus ``since``."""
    tick = os.sysconf("SC_CLK_TCK")
    with Path("/proc/stat").open() as handle:
        user, _nice, system, _idle, _wait, irq, softirq = map(int, handle.readline().split()[1:8])
    own = resource.getrusage(resource.RUSAGE_SELF)
    now = {
        "machine": (user + system + irq + softirq) / tick,  # not niced work: a compile left running beside
        "verlenv": own.ru_utime + own.ru_stime,
        "engines": sum(_process_cpu(pid, tick) for pid in _pids("dockerd", "containerd")),
    }
    return {k: v - (since or {}).get(k, 0.0) for k, v in now.items()}


def _pids(*names: str) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/comm"):
        try:
            if status.read_text().strip() in names:
                found.append(int(status.parent.name))
        except OSError:
            continue
    return found


def _process_cpu(pid: int, tick: int) -> float:
    """utime + stime + the waited-for children's (dockerd's untar helpers), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / tick


def _cpu_line(spent: dict[str, float], seconds: float) -> str:
    rest = spent["machine"] - spent["verlenv"] - spent["engines"]
    return (
        f"{spent['machine']:.0f} core-s in {seconds:.0f} s ({spent['machine'] / seconds:.2f} cores busy): verlenv "
        f"{spent['verlenv']:.0f}, dockerd+containerd {spent['engines']:.0f}, containers (pip, compileall, "
        f"self-check) and the rest {rest:.0f}"
    )


def _stages(timings: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-smoke")
    parser.add_argument("--second-engine", type=Path, help="cold build against a fresh dockerd with its data root here")
    parser.add_argument("--floor-only", action="store_true", help="print the floor and bytecode times only")
    parser.add_argument("--rebuilds", type=int, default=0, help="only N verlenv-changed rebuilds (built once before)")
    parser.add_argument(
        "--without-builds", type=Path, metavar="DIR", help="make DIR a copy without [[builds]] and stop"
    )
    args = parser.parse_args()
    paths = find_root()
    if args.without_builds:
        copy = without_builds(paths, args.without_builds, args.profile, Cache(default_root()))
        print(f"{copy.root}: {args.profile} without [[builds]], locked and verified; build it there, run this from it")
        return
    with _tags_kept(args.profile, read_lock(paths.lock(args.profile)).sha256):
        _bench(args, paths, Cache(default_root()))


def _bench(args: argparse.Namespace, paths, cache: Cache) -> None:  # type: ignore[no-untyped-def]
    if args.rebuilds:
        runs = [_rebuild(paths, args.profile, cache, f"{time.time_ns()}-{n}") for n in range(args.rebuilds)]
        times = [seconds for _, seconds in runs]
        each = " ".join(f"{t:.1f}" for t in times)
        print(f"rebuilds, verlenv changed  {each} s; median {statistics.median(times):.1f} s")
        print(f"   the last: {_stages(runs[-1][0].timings)}")
        return
    profile, lock = load_profile(paths, args.profile), read_lock(paths.lock(args.profile))
    wheels = [f.path for f in _wheels(paths, profile, lock, cache) if f.is_wheel]
    with tempfile.TemporaryDirectory(dir=cache.tmp) as tmp:
        before = _children_cpu()
        unpacked, hashed, files, size = floor(wheels, Path(tmp))
        unpack_cpu = _children_cpu() - before
        compiled, sources = bytecode(Path(tmp))
        bytecode_cpu = _children_cpu() - before - unpack_cpu
    total_floor = unpacked + hashed
    print(f"floor: unpack {len(wheels)} wheels {unpacked:6.1f} s ({unpack_cpu:.0f} core-s) + hash {files:,} files "
          f"({size / 2**30:.2f} GiB) {hashed:5.1f} s = {total_floor:6.1f} s")  # fmt: skip
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    print(f"bytecode: compileall of {sources:,} .py files {compiled:6.1f} s ({bytecode_cpu:.0f} core-s; Python "
          f"{python}, the image's is {profile.python})")  # fmt: skip
    if args.floor_only:
        return
    if args.second_engine:
        shutil.rmtree(args.second_engine, ignore_errors=True)
        args.second_engine.mkdir(parents=True)
        with second_engine(args.second_engine):
            before = _cpu()
            cold, cold_s = _build(paths, args.profile, cache, nocache=True)
            spent = _cpu(before)
    else:
        _make_room(paths, args.profile)
        before = _cpu()
        cold, cold_s = _build(paths, args.profile, cache, nocache=True)
        spent = _cpu(before)
    print(f"cold build                 {cold_s:7.1f} s  ({_stages(cold.timings)})")
    print(f"cold build CPU             {_cpu_line(spent, cold_s)}")
    print(f"cold / floor               {cold_s / total_floor:7.2f}")
    print(f"cold / (floor + bytecode)  {cold_s / (total_floor + compiled):7.2f}")
    # Work no build of this image can skip, on every core at once: the engine's load (the issue asks for
    # a load through the Docker SDK), unpacking the wheels and compiling their bytecode (hash-checked .pyc).
    cores = os.cpu_count() or 1
    bound = (spent["engines"] + unpack_cpu + bytecode_cpu) / cores
    parts = f"engine {spent['engines']:.0f} + unpack {unpack_cpu:.0f} + bytecode {bytecode_cpu:.0f} core-s"
    print(f"lower bound                {bound:7.1f} s = ({parts}) / {cores} cores")
    print(f"so cold / floor >=         {bound / total_floor:7.2f}")
    print(f"image size                 {cold.size / 2**30:7.2f} GiB ({cold.size:,} bytes), image {cold.image_id[:19]}")
    top_result, top_s = _rebuild(paths, args.profile, cache, f"a change in the top layer only, {time.time_ns()}")
    print(f"rebuild, verlenv changed   {top_s:7.1f} s  ({_stages(top_result.timings)})")
    print(f"verlenv rebuild / cold     {top_s / cold_s:7.3f}")
    # The first rebuild follows a cold build whose 10 GiB pushed this engine's files out of the page
    # cache; a developer's next rebuilds do not, so both are printed.
    more = [_rebuild(paths, args.profile, cache, f"{time.time_ns()}-{n}") for n in range(2)]
    steady = statistics.median(seconds for _, seconds in more)
    print(f"2 more rebuilds            {' '.join(f'{s:.1f}' for _, s in more)} s ({_stages(more[-1][0].timings)})")
    print(f"their median / cold        {steady / cold_s:7.3f}")


if __name__ == "__main__":
    main()
