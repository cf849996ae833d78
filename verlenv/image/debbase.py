"""The Debian base layer, made by mmdebstrap from recorded .deb files, the same on any machine.

Two steps. *Resolve* (first time, or `--update`): mmdebstrap installs the base's packages from the
mirror and every .deb apt downloaded (and verified against the signed indexes) is copied out, hashed
and recorded. *Make*: mmdebstrap installs again from a local repository holding exactly the recorded
files, with SOURCE_DATE_EPOCH (mmdebstrap then writes a reproducible tree) and PYTHONHASHSEED=0 (the
.pyc files Debian's py3compile writes hold sets whose order would otherwise follow the hash seed),
and its tar is re-written by the layer writer, dropping what a container runtime provides itself
(/dev nodes, hostname, resolv.conf) and documentation.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from verlenv.errors import ConfigError, ServiceError
from verlenv.image import debs as debsmod
from verlenv.image.debs import Deb, Source
from verlenv.image.layerstore import LayerStore, StoredLayer
from verlenv.image.tarlayer import tar_items, write_layer
from verlenv.profiles.bases import Base
from verlenv.wheels.cache import Cache

RECIPE_VERSION = 2
WRITER_VERSION = 1  # bump when the layer writer's output changes for the same input
VARIANT = "minbase"
# What the image's apt uses later; not where the debs came from (that is the local repository).
IMAGE_SOURCES = (
    Source("http://deb.debian.org/debian", "{suite}"),
    Source("http://deb.debian.org/debian", "{suite}-updates"),
    Source("http://deb.debian.org/debian-security", "{suite}-security"),
)
_DROP = re.compile(
    r"^(dev/.|etc/hostname$|etc/resolv\.conf$|usr/share/(man|info)/.|usr/share/doc/[^/]+/(?!copyright$))"
)


def recipe_hash(base: Base) -> str:
    recipe = {"v": RECIPE_VERSION, "suite": base.suite, "packages": sorted(base.packages), "variant": VARIANT}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def image_sources(suite: str) -> list[Source]:
    return [Source(s.uri, s.suite.format(suite=suite)) for s in IMAGE_SOURCES]


def host_sources(suite: str, mirror: str = "") -> list[Source]:
    """Where to resolve from: this host's apt sources for the suite family (so the project names no
    mirror), ``mirror`` for the main archive when given, Debian's own hosts otherwise."""
    found = [] if mirror else _apt_sources(suite)
    if found:
        return found
    defaults = image_sources(suite)
    return [Source(mirror, s.suite) if mirror and "security" not in s.suite else s for s in defaults]


def _apt_sources(suite: str) -> list[Source]:
    found = []
    for file in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", file.read_text()):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:(.*)$", stanza, re.M)
            if uris and suites:
                found += [Source(uris.group(1), s) for s in suites.group(1).split() if re.match(rf"{suite}(-|$)", s)]
    return found


def layer_key(base: Base) -> str:
    blob = json.dumps({"debs": sorted(base.debs), "epoch": base.epoch, "recipe": base.recipe, "w": WRITER_VERSION})
    return "base-" + hashlib.sha256(blob.encode()).hexdigest()


def resolve(base: Base, sources: list[Source], cache: Cache, quiet: bool) -> list[Deb]:
    """Install the base from ``sources`` once, to learn (and keep) every .deb it takes."""
    with tempfile.TemporaryDirectory(prefix="verlenv-debs-", dir=cache.tmp) as tmp:
        out = Path(tmp) / "debs"
        out.mkdir()
        hooks = [
            "--skip=essential/unlink",
            '--aptopt=APT::Keep-Downloaded-Packages "true"',
            f"--customize-hook=copy-out /var/cache/apt/archives {out}",
        ]
        _mmdebstrap(base, "null", "/dev/null", [s.line() for s in sources], hooks, _now_epoch(), quiet)
        return debsmod.record(sorted((out / "archives").glob("*.deb")), cache)


def make_layer(base: Base, cache: Cache, quiet: bool, mirror: str = "") -> StoredLayer:
    """The base layer from the recorded debs: from the store when made before, else made now."""
    store = LayerStore(cache)
    key = layer_key(base)
    found = store.find(key)
    if found:
        return found
    recorded = [Deb.parse(line, f"bases.{base.name}.debs") for line in base.debs]
    _fetch_missing(recorded, base, cache, mirror)
    with tempfile.TemporaryDirectory(prefix="verlenv-base-", dir=cache.tmp) as tmp:
        repo = debsmod.local_repository(recorded, cache, Path(tmp) / "repo", base.suite)
        raw = Path(tmp) / "rootfs.tar"
        lines = "\\n".join(s.line() for s in image_sources(base.suite))
        hooks = [f"--customize-hook=printf '{lines}\\n' > \"$1/etc/apt/sources.list\""]
        _mmdebstrap(
            base, "tar", str(raw), [f"deb [trusted=yes] copy://{repo} {base.suite} main"], hooks, base.epoch, quiet
        )
        staged = store.staging("base")
        with tarfile.open(raw) as tar:
            info = write_layer(tar_items(tar, keep=lambda path: not _DROP.match(path)), staged, base.epoch)
    return store.put(key, staged, info)


def _fetch_missing(recorded: Iterable[Deb], base: Base, cache: Cache, mirror: str) -> None:
    missing = [deb for deb in recorded if cache.cached_file(deb.sha256) is None]
    if not missing:
        return
    offers = debsmod.mirror_offers(host_sources(base.suite, mirror or base.mirror))
    for deb in missing:
        debsmod.fetch(deb, offers, cache)


def _now_epoch() -> int:
    today = dt.datetime.now(dt.timezone.utc).date()
    return int(dt.datetime(today.year, today.month, today.day, tzinfo=dt.timezone.utc).timestamp())


def resolution_epoch() -> int:
    """SOURCE_DATE_EPOCH for a base resolved today: midnight UTC, so a day's re-runs agree."""
    return _now_epoch()


def _mmdebstrap(
    base: Base, fmt: str, target: str, sources: list[str], extra: list[str], epoch: int, quiet: bool
) -> None:
    if shutil.which("mmdebstrap") is None:
        raise ServiceError("mmdebstrap is not installed", hint="verlenv services up (or apt-get install mmdebstrap)")
    cmd = ["mmdebstrap", f"--variant={VARIANT}", "--mode=root", f"--format={fmt}", "--arch=amd64"]
    if base.packages:
        cmd.append("--include=" + ",".join(base.packages))
    cmd += [*extra, base.suite, target, *sources]
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "SOURCE_DATE_EPOCH": str(epoch),
        "PYTHONHASHSEED": "0",
        "LC_ALL": "C",
    }
    tail: deque[str] = deque(maxlen=30)
    # umask 022: maintainer scripts create files (shadow, ld.so.cache, dpkg's database) with it
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, umask=0o022
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            if not quiet and line.startswith("I: "):
                print(f"[base] {line.rstrip()[3:]}", file=sys.stderr, flush=True)
    if proc.returncode != 0:
        raise ServiceError(f"mmdebstrap failed for base '{base.name}':\n" + "\n".join(tail))


def check_recipe(base: Base) -> None:
    if base.kind != "debian":
        raise ConfigError(f"base '{base.name}' is a {base.kind} base; only debian bases are made here")
