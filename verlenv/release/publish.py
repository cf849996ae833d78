"""The publish gate: only an image whose passing acceptance report names it, by image ID and by the
digest of its per-file manifest, gets pushed and cataloged.

Order: every check first (catalog readable; the image built here from the current lock, its config
and layers in the cache; a passing report for this exact image ID and file manifest, run on a GPU
for GPU profiles; the registry answering); then the blobs verlenv wrote are pushed as they are
(deterministic gzip, so the manifest digest is reproducible) under the immutable tag, the digest is
read back, the report is attached as an OCI artifact tagged sha256-<digest>.acceptance, the moving
tag is set, and only then is the catalog written atomically. No Docker engine is involved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.accept.image import load_report, store_report
from verlenv.errors import CheckFailed, ConfigError, IntegrityError
from verlenv.image import expected
from verlenv.image.build import record_path
from verlenv.image.stored import StoredImage, stored_image
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.release import catalog, ocipush
from verlenv.release.attachment import attachment_tag
from verlenv.release.httppull import FILES_MANIFEST_LABEL
from verlenv.release.regclient import RegistryClient
from verlenv.release.registry import split_reference
from verlenv.wheels.cache import Cache

COMPONENTS = ("torch", "vllm", "verl", "cuda", "python")

__all__ = ["Published", "attachment_tag", "publish"]


@dataclass(frozen=True)
class Published:
    entry: catalog.Entry
    catalog_path: Path
    uploaded: int  # blobs sent (0 when the registry had them all)


@dataclass(frozen=True)
class Destination:
    registry: str  # HOST[:PORT]/REPO
    ca_cert: Path | None = None
    insecure: bool = False


def publish(
    paths: ProjectPaths,
    profile_name: str,
    cache: Cache,
    registry: str | Destination,
    catalog_path: Path,
    image: str = "",
    report_file: Path | None = None,
) -> Published:
    where = registry if isinstance(registry, Destination) else Destination(registry)
    entries = catalog.read(catalog_path)  # a corrupt catalog stops us before anything is pushed
    host, repository = split_reference(where.registry)
    profile = load_profile(paths, profile_name)
    lock = read_lock(paths.lock(profile_name))
    local = stored_image(cache, image or _recorded_image(paths, profile_name))
    labels = json.loads(local.config)["config"]["Labels"]
    if labels.get("io.verlenv.lock-sha256") != lock.sha256:
        raise CheckFailed(
            f"image {local.image_id[:19]} was not built from the current lock of {profile_name}",
            hint=f"rebuild: verlenv build --profile {profile_name}",
        )
    files_sha = local.manifest().sha256
    report = _accepted(cache, local.image_id, files_sha, profile_name, not profile.is_cpu, report_file)
    client = RegistryClient(host, ca_cert=where.ca_cert, insecure=where.insecure)
    client.ping()  # unreachable or refused: nothing was pushed
    pushed = _push(client, repository, profile_name, lock.sha256, local, report)
    entry = _entry(f"{host}/{repository}", profile_name, lock.sha256, local, labels, files_sha, report, pushed)
    entries[profile_name] = entry
    catalog.write(catalog_path, entries)
    return Published(entry, catalog_path, pushed[0].uploaded)


def _recorded_image(paths: ProjectPaths, profile: str) -> str:
    record = expected.read(record_path(paths, profile))
    if record is None:
        raise ConfigError(
            f"no lockfiles/{profile}.image.json: nothing built to publish", hint=f"verlenv build --profile {profile}"
        )
    return record.image_id


def _accepted(
    cache: Cache, image_id: str, files_sha: str, profile: str, gpu: bool, report_file: Path | None
) -> dict[str, Any]:
    report = _read_report(report_file) if report_file else load_report(cache, image_id)
    if report is None:
        raise CheckFailed(
            f"refusing to publish {profile}: no acceptance report for image {image_id[:19]}",
            hint=f"verlenv accept-image --profile {profile} (or --rootfs on a GPU host, then --report FILE here)",
        )
    if report.get("image_id") != image_id:
        raise CheckFailed(
            f"refusing to publish {profile}: the acceptance report is for image "
            f"{str(report.get('image_id'))[:19]}, not {image_id[:19]}"
        )
    if report.get("files_manifest_sha256") != files_sha:
        raise CheckFailed(
            f"refusing to publish {profile}: the acceptance report ran in a tree with file manifest "
            f"{str(report.get('files_manifest_sha256'))[:16] or 'unknown'}, not this image's {files_sha[:16]}",
            hint="accept the image in its own filesystem (accept-image, or accept-image --rootfs with its pack)",
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
    if report_file:
        store_report(cache, report)  # kept by image ID beside the others
    return report


def _read_report(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such acceptance report") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not a JSON acceptance report ({exc})") from None


def _push(
    client: RegistryClient, repository: str, profile: str, lock_sha: str, local: StoredImage, report: dict[str, Any]
) -> tuple[ocipush.PushedImage, str]:
    """(the pushed image, its attachment's tag): immutable tag, read back, attachment, moving tag."""
    immutable = f"{profile}-{lock_sha[:12]}"
    pushed = ocipush.push_image(client, repository, immutable, local.config, local.layer_paths, _blob_cache(local))
    remote = client.manifest_digest(repository, immutable)
    if remote != pushed.digest:
        raise IntegrityError(
            f"registry reports {remote} for {repository}:{immutable}, the push gave {pushed.digest}; catalog unchanged",
            hint="someone else pushed to that tag, or the registry is misbehaving",
        )
    attached = ocipush.push_attachment(client, repository, pushed.descriptor, report)
    client.put_manifest(repository, profile, pushed.manifest, ocipush.SCHEMA2_MANIFEST)
    return pushed, attached.tag


def _entry(
    base: str,
    profile: str,
    lock_sha: str,
    local: StoredImage,
    labels: dict[str, str],
    files_sha: str,
    report: dict[str, Any],
    pushed: tuple[ocipush.PushedImage, str],
) -> catalog.Entry:
    image, attachment = pushed
    ours = {k: v for k, v in labels.items() if k.startswith("io.verlenv.")}
    components = {
        k.removeprefix("io.verlenv."): v for k, v in ours.items() if k.removeprefix("io.verlenv.") in COMPONENTS
    }
    return catalog.Entry(
        profile=profile,
        repository=base,
        digest=image.digest,
        tags=[f"{base}:{profile}-{lock_sha[:12]}", f"{base}:{profile}"],
        lock_sha256=lock_sha,
        image_id=local.image_id,
        components=components,
        acceptance=_summary(report),
        attachment=attachment,
        labels={**ours, FILES_MANIFEST_LABEL: files_sha},
    )


def _blob_cache(local: StoredImage) -> Path:
    """Compressed layers live beside the layer store: gzip once, push many times."""
    return local.layers[0].path.parent.parent / "blobs"


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    steps = report.get("steps", [])
    return {
        "passed": report["passed"],
        "image_id": report["image_id"],
        "files_manifest_sha256": report.get("files_manifest_sha256", ""),
        "device": report["host"].get("device"),
        "gpu": report["host"].get("gpu", ""),
        "runner": report.get("ran_in", {}).get("runner", ""),
        "steps": len(steps),
        "seconds": report.get("seconds"),
        "reward_first": steps[0]["reward"] if steps else None,
        "reward_last": steps[-1]["reward"] if steps else None,
        "created": report.get("created"),
        "backend": report.get("backend"),
        "rollout_mode": report.get("rollout_mode"),
    }
