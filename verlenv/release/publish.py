"""The publish gate: only an image whose passing acceptance report names it gets pushed and cataloged.

Order: every check first (catalog readable, image built from the current lock, acceptance passed
for this exact image ID, on a GPU for GPU profiles, registry answering); then push the immutable
tag, read the digest back from the registry, push the acceptance report as an attachment tagged
sha256-<digest>.acceptance, move the profile tag, and only then write the catalog atomically.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.accept.image import load_report, profile_image
from verlenv.errors import CheckFailed, ConfigError, IntegrityError, ServiceError
from verlenv.image.services import ensure_engine, registry_answers
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.release import catalog
from verlenv.release.registry import manifest_digest, split_reference
from verlenv.wheels.cache import Cache

COMPONENTS = ("torch", "vllm", "verl", "cuda", "python")


@dataclass(frozen=True)
class Published:
    entry: catalog.Entry
    catalog_path: Path


def attachment_tag(digest: str) -> str:
    return f"{digest.replace(':', '-')}.acceptance"


def publish(
    paths: ProjectPaths, profile_name: str, cache: Cache, registry: str, catalog_path: Path, image: str = ""
) -> Published:
    entries = catalog.read(catalog_path)  # a corrupt catalog stops us before anything is pushed
    host, repository = split_reference(registry)
    engine = ensure_engine()
    profile = load_profile(paths, profile_name)
    lock = read_lock(paths.lock(profile_name))
    local = _image(engine, image or profile_image(paths, profile_name))
    if local.labels.get("io.verlenv.lock-sha256") != lock.sha256:
        raise CheckFailed(
            f"{local.tags or local.id} was not built from the current lock of {profile_name}",
            hint=f"rebuild: verlenv build --profile {profile_name}",
        )
    report = _accepted(cache, local.id, profile_name, gpu=not profile.is_cpu)
    if not registry_answers(host):
        raise ServiceError(f"registry {host} does not answer; nothing was pushed", hint="start it, then re-run")
    base = f"{host}/{repository}"
    immutable, moving = f"{base}:{profile_name}-{lock.sha256[:12]}", f"{base}:{profile_name}"
    digest = _push(engine, local, immutable)
    remote = manifest_digest(host, repository, immutable.rsplit(":", 1)[1])
    if remote != digest:
        raise IntegrityError(
            f"registry reports {remote} for {immutable}, the push said {digest}; catalog unchanged",
            hint="someone else pushed to that tag, or the registry is misbehaving",
        )
    attachment = _attach(engine, base, digest, local.id, report)
    _push(engine, local, moving)
    entry = catalog.Entry(
        profile=profile_name,
        repository=base,
        digest=digest,
        tags=[immutable, moving],
        lock_sha256=lock.sha256,
        image_id=local.id,
        components={
            k.removeprefix("io.verlenv."): v
            for k, v in local.labels.items()
            if k.removeprefix("io.verlenv.") in COMPONENTS
        },
        acceptance=_summary(report),
        attachment=attachment,
        labels={k: v for k, v in local.labels.items() if k.startswith("io.verlenv.")},
    )
    entries[profile_name] = entry
    catalog.write(catalog_path, entries)
    return Published(entry, catalog_path)


def _image(engine, reference: str):  # type: ignore[no-untyped-def]
    import docker.errors

    try:
        return engine.images.get(reference)
    except docker.errors.ImageNotFound:
        raise ConfigError(f"no local image {reference}", hint="build it first: verlenv build --profile NAME") from None


def _accepted(cache: Cache, image_id: str, profile: str, gpu: bool) -> dict[str, Any]:
    report = load_report(cache, image_id)
    if report is None:
        raise CheckFailed(
            f"refusing to publish {profile}: no acceptance report for image {image_id[:19]}",
            hint=f"verlenv accept-image --profile {profile}",
        )
    if report.get("image_id") != image_id:
        raise CheckFailed(
            f"refusing to publish {profile}: the acceptance report is for image "
            f"{str(report.get('image_id'))[:19]}, not {image_id[:19]}"
        )
    if not report.get("passed"):
        failed = [v["name"] for v in report.get("verdicts", []) if not v["passed"]]
        raise CheckFailed(f"refusing to publish {profile}: acceptance failed ({', '.join(failed)})")
    if gpu and not str(report.get("host", {}).get("device", "")).startswith("cuda"):
        raise CheckFailed(
            f"refusing to publish {profile}: a GPU profile needs a GPU acceptance run; this one ran on "
            f"{report.get('host', {}).get('device')}",
            hint="run `verlenv accept-image` on a GPU host",
        )
    return report


def _push(engine, image, reference: str) -> str:  # type: ignore[no-untyped-def]
    repository, tag = reference.rsplit(":", 1)
    image.tag(repository, tag)
    digest = ""
    try:
        for chunk in engine.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise ServiceError(
                    f"push of {reference} failed: {chunk['error']}; catalog unchanged",
                    hint="re-run publish once the registry is healthy; layers already pushed are reused",
                )
            digest = chunk.get("aux", {}).get("Digest", digest)
    except OSError as exc:  # the engine connection broke
        raise ServiceError(f"push of {reference} broke off: {exc}; catalog unchanged") from None
    if not digest:
        raise ServiceError(f"push of {reference} ended without a digest; catalog unchanged")
    return str(digest)


def _attach(engine, base: str, digest: str, image_id: str, report: dict[str, Any]) -> str:  # type: ignore[no-untyped-def]
    """Push the report as a FROM-scratch image tagged after the digest it vouches for."""
    tag = attachment_tag(digest)
    payload = json.dumps(report, indent=1).encode()
    dockerfile = (
        f"FROM scratch\nCOPY acceptance.json /acceptance.json\n"
        f"LABEL io.verlenv.acceptance-for={digest} io.verlenv.acceptance-image-id={image_id} "
        f"io.verlenv.acceptance-passed={str(report['passed']).lower()}\n"
    ).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("acceptance.json", payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    attachment, _ = engine.images.build(fileobj=buffer, custom_context=True, network_mode="none", rm=True)
    _push(engine, attachment, f"{base}:{tag}")
    return tag


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    steps = report.get("steps", [])
    return {
        "passed": report["passed"],
        "image_id": report["image_id"],
        "device": report["host"].get("device"),
        "gpu": report["host"].get("gpu", ""),
        "steps": len(steps),
        "seconds": report.get("seconds"),
        "reward_first": steps[0]["reward"] if steps else None,
        "reward_last": steps[-1]["reward"] if steps else None,
        "created": report.get("created"),
        "backend": report.get("backend"),
    }
