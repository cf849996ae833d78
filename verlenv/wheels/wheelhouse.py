"""The wheelhouse stage: every file a lock names, for the target platform, in the content cache.

For each locked distribution the best file for the profile's platform and Python is chosen
among the files whose sha256 the lock lists (a wheel when one fits, else the sdist). Files
already in the cache are used without any network access; missing ones are downloaded in
parallel (resuming partial downloads), hashed on arrival, and a mismatch is an IntegrityError
that names the file and both hashes, with the bad bytes deleted.
"""

from __future__ import annotations

import fcntl
import hashlib
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from verlenv.errors import IntegrityError, ResolutionError
from verlenv.lock.index import IndexFile, default_index_url, project_files
from verlenv.lock.lockfile import Lock, LockedDist
from verlenv.lock.tools import pip_command, run
from verlenv.profiles.profile import Profile
from verlenv.wheels.cache import CHUNK, Cache, CorruptCacheFile, sha256_of


@dataclass(frozen=True)
class HouseFile:
    name: str
    version: str
    filename: str
    sha256: str
    path: Path

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class Wheelhouse:
    files: tuple[HouseFile, ...]
    downloaded: int
    downloaded_bytes: int

    def get(self, name: str) -> HouseFile | None:
        return next((f for f in self.files if f.name == name), None)


def target_tags(python: str, platform: str) -> list[Tag]:
    """Tags a wheel may carry to install on ``platform`` (uv form) and CPython ``python``, best first."""
    major, minor = (int(x) for x in python.split("."))
    arch, _, glibc = platform.partition("-manylinux_")
    top = int(glibc.split("_")[1])
    platforms = [f"manylinux_2_{n}_{arch}" for n in range(top, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    platforms += [f"{legacy[n]}_{arch}" for n in (17, 12, 5) if n <= top]
    tags = list(cpython_tags((major, minor), platforms=platforms))
    tags += list(compatible_tags((major, minor), f"cp{major}{minor}", platforms=platforms))
    return tags


def _rank(filename: str, tags: list[Tag]) -> int | None:
    """Lower is better; None when the file cannot be installed on the target."""
    if filename.endswith(".whl"):
        try:
            file_tags = parse_wheel_filename(filename)[3]
        except InvalidWheelFilename:
            return None
        ranks = [tags.index(t) for t in file_tags if t in tags]
        return min(ranks) if ranks else None
    try:
        parse_sdist_filename(filename)
    except InvalidSdistFilename:
        return None
    return len(tags)  # an sdist fits anywhere, after every wheel


def choose(dist: LockedDist, candidates: Iterable[IndexFile], tags: list[Tag]) -> IndexFile | None:
    allowed = set(dist.hashes)
    ranked = [(r, f) for f in candidates if f.sha256 in allowed and (r := _rank(f.filename, tags)) is not None]
    return min(ranked, key=lambda rf: (rf[0], rf[1].filename))[1] if ranked else None


class Progress:
    """One status line on a terminal; a line per 10% elsewhere (CI logs stay short)."""

    def __init__(self, total_files: int, total_bytes: int, quiet: bool) -> None:
        self.total_files, self.total_bytes, self.quiet = total_files, total_bytes, quiet
        self.files = self.bytes = 0
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last_decile = -1
        self._tty = sys.stderr.isatty()

    def add(self, nbytes: int = 0, files: int = 0) -> None:
        with self._lock:
            self.bytes += nbytes
            self.files += files
            self._show()

    def _show(self) -> None:
        if self.quiet or not self.total_bytes:
            return
        rate = self.bytes / max(time.monotonic() - self._started, 1e-6) / 2**20
        line = (
            f"[wheelhouse] {self.files}/{self.total_files} files, {self.bytes / 2**30:.2f}/"
            f"{self.total_bytes / 2**30:.2f} GiB, {rate:.0f} MiB/s"
        )
        decile = int(10 * self.bytes / self.total_bytes)
        if self._tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif decile != self._last_decile:
            self._last_decile = decile
            print(line, file=sys.stderr, flush=True)


def fill(
    profile: Profile,
    lock: Lock,
    cache: Cache,
    *,
    offline: bool = False,
    jobs: int = 8,
    quiet: bool = False,
    python: str = "",
) -> Wheelhouse:
    """Every locked file for the profile's platform and Python (or ``python``, for a bundle made for
    another interpreter), from the cache or downloaded and hash-checked into it."""
    python = python or profile.python
    tags = target_tags(python, profile.platform)
    found: dict[str, HouseFile] = {}
    missing: list[LockedDist] = []
    present = cache.present()
    for dist in lock.dists:
        cached = _from_cache(dist, cache, tags, offline, present)
        if cached:
            found[dist.name] = cached
        else:
            missing.append(dist)
    if missing and offline:
        raise ResolutionError(
            f"offline, and {len(missing)} locked file(s) are not cached: " + ", ".join(d.pin for d in missing[:10])
        )
    plans = _plan(profile, missing, tags, jobs, python) if missing else []
    progress = Progress(len(plans), sum(p.size for p, _ in plans), quiet)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for dist, house in zip(
            [d for _, d in plans], pool.map(lambda pd: _download(pd[0], pd[1], cache, progress), plans), strict=True
        ):
            found[dist.name] = house
    if plans and not quiet:
        print(file=sys.stderr)
    for dist in missing:
        if dist.name not in found:
            found[dist.name] = _pip_download(dist, cache, python)
    return Wheelhouse(tuple(found[d.name] for d in lock.dists), len(missing), progress.bytes)


def _from_cache(
    dist: LockedDist, cache: Cache, tags: list[Tag], offline: bool, present: frozenset[str]
) -> HouseFile | None:
    best: tuple[int, HouseFile] | None = None
    for sha in (h for h in dist.hashes if h in present):
        try:
            path = cache.cached_file(sha)
        except CorruptCacheFile as exc:
            if offline:
                raise
            print(f"warning: {exc.message}; fetching {dist.pin} again", file=sys.stderr, flush=True)
            cache.discard(sha)
            continue
        if path is None:
            continue
        rank = _rank(path.name, tags)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, HouseFile(dist.name, dist.version, path.name, sha, path))
    return best[1] if best else None


def _plan(
    profile: Profile, dists: list[LockedDist], tags: list[Tag], jobs: int, python: str
) -> list[tuple[IndexFile, LockedDist]]:
    indexes = [default_index_url(), *profile.sources.extra_index_urls]
    local = {_spec_name(spec) for spec in profile.sources.pip_download}

    def candidates(dist: LockedDist) -> list[IndexFile]:
        return [f for url in indexes for f in project_files(url, dist.name)]

    plans = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for dist, files in zip(dists, pool.map(candidates, dists), strict=True):
            choice = choose(dist, files, tags)
            if choice is not None:
                plans.append((choice, dist))
            elif dist.name not in local:
                raise ResolutionError(
                    f"no file for {dist.pin} with a locked hash fits {profile.platform} / Python {python}",
                    hint="re-lock the profile; the index may have removed or changed the file",
                )
    return plans


def _spec_name(spec: str) -> str:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(spec).name)


def _download(item: IndexFile, dist: LockedDist, cache: Cache, progress: Progress) -> HouseFile:
    # One writer per file across processes: two verifies sharing a cache must not interleave bytes.
    with (cache.tmp / f"{item.sha256}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        done = cache.cached_file(item.sha256)
        if done is not None:
            progress.add(files=1)
            return HouseFile(dist.name, dist.version, done.name, item.sha256, done)
        return _download_locked(item, dist, cache, progress)


def _download_locked(item: IndexFile, dist: LockedDist, cache: Cache, progress: Progress) -> HouseFile:
    part = cache.tmp / f"{item.sha256}.part"
    offset = part.stat().st_size if part.exists() else 0
    digest = hashlib.sha256()
    if offset:
        with part.open("rb") as handle:  # a resumed download is hashed from its first byte
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        progress.add(offset)
    actual = _fetch(item.url, part, offset, digest, progress.add)
    if actual != item.sha256:
        part.unlink(missing_ok=True)
        raise IntegrityError(
            f"{item.filename}: sha256 mismatch (expected {item.sha256}, got {actual}); file deleted",
            hint="the index served different bytes than the lock recorded; re-lock or check the mirror",
        )
    path = cache.store(part, item.sha256, item.filename)
    progress.add(files=1)
    return HouseFile(dist.name, dist.version, item.filename, item.sha256, path)


def _fetch(url: str, part: Path, offset: int, digest: Any, report: Callable[[int], None]) -> str:
    """Append ``url`` (from ``offset``) to ``part``; return the sha256 of the whole file."""
    headers = {"User-Agent": "verlenv", **({"Range": f"bytes={offset}-"} if offset else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as response:
            if offset and response.status != 206:  # the server ignored Range: start over
                part.unlink()
                digest = hashlib.sha256()
            with part.open("ab") as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    report(len(chunk))
    except (urllib.error.URLError, OSError) as exc:
        raise ResolutionError(f"download of {url} failed: {exc}; re-run to resume") from None
    return str(digest.hexdigest())


def _pip_download(dist: LockedDist, cache: Cache, python: str) -> HouseFile:
    """For profile.sources.pip_download: let pip's configuration find the file, then verify it."""
    with tempfile.TemporaryDirectory(dir=cache.tmp) as tmp:
        options = ["--quiet", "--no-deps", "--only-binary=:all:", "--python-version", python, "--dest", tmp]
        run([*pip_command(), "download", *options, dist.pin], what=f"pip download {dist.pin}")
        files = list(Path(tmp).iterdir())
        if len(files) != 1:
            raise ResolutionError(f"pip download {dist.pin} produced {len(files)} files")
        sha = sha256_of(files[0])
        if sha not in dist.hashes:
            raise IntegrityError(
                f"{files[0].name}: sha256 {sha} is not one of the lock's hashes for {dist.pin}",
                hint="pip found a different build of this version; re-lock or fix pip's find-links",
            )
        path = cache.store(files[0], sha, files[0].name)
    return HouseFile(dist.name, dist.version, path.name, sha, path)


def fetch_locked(lock: Lock, name: str, cache: Cache) -> HouseFile:
    """``name``'s pure-Python wheel from a lock with no profile (the build backends'), through the cache;
    only a file with one of the locked hashes is taken."""
    from packaging.utils import canonicalize_name

    [dist] = [d for d in lock.dists if d.name == canonicalize_name(name)]
    tags = target_tags(lock.header.python, lock.header.platform)
    cached = _from_cache(dist, cache, tags, False, cache.present())
    if cached:
        return cached
    choice = choose(dist, project_files(default_index_url(), dist.name), tags)
    if choice is None:
        raise ResolutionError(f"no file for {dist.pin} with a locked hash is on the index", hint="re-lock it")
    return _download(choice, dist, cache, Progress(1, choice.size, quiet=True))


def fetch_wheel(name: str, version: str, cache: Cache) -> Path:
    """One pure-Python wheel by name and version, through the cache (hash from the index, checked)."""
    return fetch_release(name, version, cache, tags=None).path


def fetch_release(name: str, version: str, cache: Cache, tags: list[Tag] | None) -> HouseFile:
    """The best file of ``name`` ``version`` for ``tags`` (None: a pure-Python wheel), through the cache;
    its sha256 comes from the index and is checked on arrival. For what-if checks outside the lock."""
    from packaging.utils import canonicalize_name

    files = [f for f in project_files(default_index_url(), name) if _version_of(f.filename) == Version(version)]
    if tags is None:
        files = [f for f in files if f.filename.endswith("-none-any.whl")]
        tags = target_tags("3.11", "x86_64-manylinux_2_17")
    dist = LockedDist(canonicalize_name(name), version, tuple(f.sha256 for f in files))
    choice = choose(dist, files, tags)
    if choice is None:
        raise ResolutionError(f"no file of {name} {version} on the index fits the target", hint="check the version")
    cached = cache.cached_file(choice.sha256)
    if cached is not None:
        return HouseFile(dist.name, version, cached.name, choice.sha256, cached)
    return _download(choice, dist, cache, Progress(1, choice.size, quiet=True))


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
