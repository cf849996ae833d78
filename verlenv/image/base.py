"""`verlenv base`: make a base image from Debian packages with debootstrap, no registry involved.

The image is tagged with the hash of its recipe (suite, variant, package list, architecture), so
an unchanged recipe reuses the image already in the engine. The libraries and glibc / libstdc++
versions found in the root filesystem are written back to images/bases.toml, where `verify`
reads them to resolve DT_NEEDED and symbol versions.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import ConfigError, ServiceError
from verlenv.image.services import ensure_engine, ensure_programs
from verlenv.profiles.bases import Base, BaseFacts, load_bases, record_base
from verlenv.verify.basefacts import rootfs_facts

RECIPE_VERSION = 1
VENV = "/opt/venv"
# Image config for the imported root filesystem; the Dockerfile adds the rest.
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)
_CLEAN = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "var/cache/debconf",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "tmp",
)


@dataclass(frozen=True)
class BaseImage:
    name: str
    reference: str  # repository:recipe-hash
    image_id: str
    reused: bool
    facts: BaseFacts | None


def recipe_hash(base: Base, arch: str) -> str:
    recipe = {
        "v": RECIPE_VERSION,
        "suite": base.suite,
        "packages": sorted(base.packages),
        "arch": arch,
        "variant": "minbase",
        "changes": list(IMPORT_CHANGES),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def debian_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def reference(base: Base) -> str:
    return f"{base.image}:{recipe_hash(base, debian_arch())[:16]}"


def host_mirror() -> str:
    """The Debian mirror this host's apt uses, so the project never names one."""
    for source in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", source.read_text()):  # deb822: one source per stanza
            suites = re.search(r"^Suites:(.*)$", stanza, re.M)
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            if suites and uris and re.search(r"\b(bookworm|trixie|bullseye)(\s|$)", suites.group(1)):
                return uris.group(1)
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        match = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+\s+main", legacy.read_text(), re.M)
        if match and "security" not in match.group(1):
            return match.group(1)
    raise ConfigError("cannot find a Debian mirror in /etc/apt/sources.list{,.d}", hint="pass --mirror URL")


def make_base(bases_file: Path, name: str, *, mirror: str = "", force: bool = False, quiet: bool = False) -> BaseImage:
    bases = load_bases(bases_file)
    if name not in bases:
        raise ConfigError(f"{bases_file}: no base named '{name}'")
    base = bases[name]
    if base.kind != "debootstrap":
        raise ConfigError(f"base '{name}' is a {base.kind} base; only debootstrap bases are made here")
    client = ensure_engine()
    ref = reference(base)
    if not force and base.facts.libraries and base.facts.glibc:
        try:
            image = client.images.get(ref)
            return BaseImage(name, ref, image.id, True, None)
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: make it below
            pass
    ensure_programs(("debootstrap",))
    with tempfile.TemporaryDirectory(prefix="verlenv-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _debootstrap(base, rootfs, mirror or base.mirror or host_mirror(), quiet)
        facts = rootfs_facts(rootfs)
        image_id = _import(client, rootfs, Path(tmp) / "rootfs.tar", ref)
    record_base(
        bases_file, name, {"glibc": facts.glibc, "glibcxx": facts.glibcxx, "libraries": sorted(facts.libraries)}
    )
    return BaseImage(name, ref, image_id, False, facts)


def _debootstrap(base: Base, rootfs: Path, mirror: str, quiet: bool) -> None:
    cmd = ["debootstrap", "--variant=minbase", f"--arch={debian_arch()}"]
    if base.packages:
        cmd.append("--include=" + ",".join(base.packages))
    cmd += [base.suite, str(rootfs), mirror]
    _say(f"debootstrap {base.suite} ({len(base.packages)} extra packages) from the host's Debian mirror", quiet)
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=20)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for count, line in enumerate(proc.stdout):
            tail.append(line.rstrip())
            if not quiet and count % 40 == 0:
                _say(f"  {line.strip()}", quiet)
    if proc.returncode != 0:
        raise ServiceError("debootstrap failed:\n" + "\n".join(tail))
    for rel in _CLEAN:
        target = rootfs / rel
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir(mode=0o1777 if rel == "tmp" else 0o755)
    _say(f"  root filesystem ready in {time.monotonic() - started:.0f}s", quiet)


def _import(client, rootfs: Path, tar_path: Path, ref: str) -> str:  # type: ignore[no-untyped-def]
    with tarfile.open(tar_path, "w") as tar:
        tar.add(rootfs, arcname=".")
    repository, tag = ref.rsplit(":", 1)
    client.api.import_image_from_file(str(tar_path), repository=repository, tag=tag, changes=list(IMPORT_CHANGES))
    return str(client.images.get(ref).id)


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[base] {message}", file=sys.stderr, flush=True)
