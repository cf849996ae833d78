"""The build stage: a hermetic image from the verified wheelhouse, tagged only after it self-checked.

Order: refuse what must be refused (stale lock, missing or failed verify report, unpinned base),
make or reuse the base, turn sdists into wheels, assemble the context (re-hashing every file),
build with network_mode="none" and no tag, and tag only the image the engine returned.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from verlenv import __version__
from verlenv.errors import CheckFailed, ConfigError, ServiceError
from verlenv.image import wheelimages
from verlenv.image.base import make_base
from verlenv.image.context import assemble, group_layers, source_date_epoch, verlenv_wheel
from verlenv.image.manifest import Manifest
from verlenv.image.services import ensure_engine
from verlenv.lock.lockfile import Lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.bases import Base
from verlenv.profiles.profile import Profile
from verlenv.verify.report import require_verified
from verlenv.wheels.cache import Cache
from verlenv.wheels.sdists import wheel_from_sdist
from verlenv.wheels.wheelhouse import HouseFile, fill, target_tags


@dataclass(frozen=True)
class BuildOptions:
    allow_unpinned_base: bool = False
    quiet: bool = False
    nocache: bool = False
    extra_tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildResult:
    profile: str
    image_id: str
    tags: tuple[str, ...]
    size: int
    timings: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = time.monotonic() - started


def image_repository(profile: str) -> str:
    return f"verlenv/{profile.lower()}"


def build_image(paths: ProjectPaths, name: str, cache: Cache, options: BuildOptions) -> BuildResult:
    timer = _Timer()
    with timer.stage("checks"):
        profile, lock, verify_sha = _preflight(paths, name, options)
    with timer.stage("base"):
        base_ref = _base_reference(paths, profile.base, options)
    with timer.stage("wheels"):
        epoch = source_date_epoch(lock.header.exclude_newer)
        files = [*_wheels(profile, lock, cache), verlenv_wheel(paths.root, cache, epoch)]
    with timer.stage("pack"):
        packed = _packed_layers(profile, files, cache, options)
    with tempfile.TemporaryDirectory(prefix=f"verlenv-context-{name}-", dir=cache.tmp) as tmp:
        with timer.stage("context"):
            manifest = _manifest(profile, lock, verify_sha, files, base_ref)
            assemble(Path(tmp), profile, base_ref, files, manifest, paths.dockerfile_template, packed)
        labels = _labels(profile, lock, verify_sha, manifest, paths.root)
        with timer.stage("build"):
            image_id = _engine_build(Path(tmp), labels, options)
    with timer.stage("tag"):
        tags = _tag(image_id, profile, lock, options)
    client = ensure_engine()
    size = int(client.images.get(image_id).attrs.get("Size", 0))
    return BuildResult(name, image_id, tags, size, timer.timings, labels)


def _preflight(paths: ProjectPaths, name: str, options: BuildOptions) -> tuple[Profile, Lock, str]:
    profile, lock, verify_sha = require_verified(paths, name, f"refusing to build {name}")
    if profile.base.kind == "registry" and not profile.base.pinned and not options.allow_unpinned_base:
        raise ConfigError(
            f"refusing to build {name}: base '{profile.base.name}' ({profile.base.image}) is not pinned by digest",
            hint="add digest = \"sha256:...\" to it in images/bases.toml (README: 'Base images'), "
            "or pass --allow-unpinned-base knowingly",
        )
    return profile, lock, verify_sha


def _packed_layers(profile: Profile, files: list[HouseFile], cache: Cache, options: BuildOptions) -> dict[str, str]:
    """layer -> wheels image, for every layer but verlenv's own (the one that changes every build)."""
    client = ensure_engine()
    packed = {}
    for layer, items in group_layers(profile, files).items():
        if layer != "verlenv":
            packed[layer], _ = wheelimages.ensure(
                client, layer, items, cache, repack=options.nocache, quiet=options.quiet
            )
    return packed


def _base_reference(paths: ProjectPaths, base: Base, options: BuildOptions) -> str:
    if base.kind == "registry":
        return base.reference
    made = make_base(paths.bases, base.name, quiet=options.quiet)
    return made.reference


def _wheels(profile: Profile, lock: Lock, cache: Cache) -> list[HouseFile]:
    # Missing files are fetched (and hash-checked) first; the image build itself has no network.
    house = fill(profile, lock, cache, quiet=True)
    tags = target_tags(profile.python, profile.platform)
    return [f if f.is_wheel else wheel_from_sdist(f, cache, tags, profile.python) for f in house.files]


def _manifest(profile: Profile, lock: Lock, verify_sha: str, files: list[HouseFile], base_ref: str) -> Manifest:
    locked = {h for d in lock.dists for h in d.hashes}
    return Manifest(
        profile=profile.name,
        lock_sha256=lock.sha256,
        verify_sha256=verify_sha,
        source_date_epoch=source_date_epoch(lock.header.exclude_newer),
        components={**dict(profile.components), "cuda": profile.cuda, "python": profile.python},
        distributions={f.name: f.version for f in sorted(files, key=lambda f: f.name)},
        layers={layer: [h.name for h in items] for layer, items in group_layers(profile, files).items()},
        base={"name": profile.base.name, "reference": base_ref, "glibc": profile.base.facts.glibc},
        verlenv_version=__version__,
        # Wheels whose hash is not in the lock: built here from a locked sdist, or verlenv itself.
        built_from_sdist={f.name: f.sha256 for f in files if f.sha256 not in locked and f.name != "verlenv"},
        overrides=profile.override_reasons,
        waivers=dict(profile.waivers),
    )


def _labels(profile: Profile, lock: Lock, verify_sha: str, manifest: Manifest, root: Path) -> dict[str, str]:
    created = dt.datetime.fromtimestamp(manifest.source_date_epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {
        "org.opencontainers.image.title": image_repository(profile.name),
        "org.opencontainers.image.description": profile.description,
        "org.opencontainers.image.version": lock.sha256[:12],
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": manifest.base["reference"],
        "io.verlenv.profile": profile.name,
        "io.verlenv.lock-sha256": lock.sha256,
        "io.verlenv.verify-sha256": verify_sha,
        "io.verlenv.version": __version__,
        "io.verlenv.python": profile.python,
        "io.verlenv.cuda": profile.cuda,
    }
    for name in ("torch", "vllm", "verl", "sglang", "flash-attn", "transformers"):
        version = lock.version_of(name)
        if version:
            labels[f"io.verlenv.{name}"] = version
    revision = _git_revision(root)
    if revision:
        labels["org.opencontainers.image.revision"] = revision
    return labels


def _git_revision(root: Path) -> str:
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _engine_build(context: Path, labels: dict[str, str], options: BuildOptions) -> str:
    client = ensure_engine()
    image_id = ""
    tail: list[str] = []
    if labels:  # one LABEL instruction: the API's labels= becomes one build step (and commit) per label
        dockerfile = context / "Dockerfile"
        line = "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
        dockerfile.write_text(dockerfile.read_text().rstrip("\n") + "\n" + line.replace("$", "\\$") + "\n")
    stream = client.api.build(
        path=str(context),
        network_mode="none",
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
        nocache=options.nocache,
    )
    for chunk in stream:
        if "error" in chunk:
            detail = _ANSI.sub("", chunk.get("errorDetail", {}).get("message", chunk["error"]))
            shown = [] if not options.quiet else tail[-25:]  # the log was already streamed otherwise
            raise CheckFailed("the image build failed; nothing was tagged:\n" + "\n".join([*shown, detail]))
        line = _ANSI.sub("", chunk.get("stream", ""))
        if line:
            tail = [*tail[-60:], line.rstrip()]
            if not options.quiet:
                _echo(line)
        image_id = chunk.get("aux", {}).get("ID", image_id)
    if not image_id:
        raise ServiceError("the engine finished the build without an image id; nothing was tagged")
    return image_id


def _echo(line: str) -> None:
    text = line.rstrip("\n")
    if text.startswith("Step "):
        print(f"[build] {text}", file=sys.stderr, flush=True)
    elif text.strip():
        print(f"        {text}", file=sys.stderr, flush=True)


def _tag(image_id: str, profile: Profile, lock: Lock, options: BuildOptions) -> tuple[str, ...]:
    client = ensure_engine()
    image = client.images.get(image_id)
    repository = image_repository(profile.name)
    tags = [f"{repository}:{lock.sha256[:12]}", f"{repository}:latest", *options.extra_tags]
    for tag in tags:
        repo, _, name = tag.rpartition(":")
        image.tag(repo, name)
    return tuple(tags)


def summary(result: BuildResult) -> str:
    lines = [f"image {result.image_id}", *(f"tag   {t}" for t in result.tags), f"size  {result.size / 2**30:.2f} GiB"]
    lines.append(
        "time  "
        + ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items())
        + f" (total {sum(result.timings.values()):.1f}s)"
    )
    return "\n".join(lines)
