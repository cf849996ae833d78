"""Host side of acceptance: run `verlenv accept` inside a built image, keep the report by image ID.

The container gets the GPUs when the host has an NVIDIA driver, a large /dev/shm (NCCL and Ray
need it), no network, and VERLENV_IMAGE_ID, so the report names the image it ran in. Reports are
stored under <cache>/acceptance/<image-id>.json; `verlenv publish` reads them from there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import CheckFailed, ConfigError
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache

SHM_SIZE = "8g"


def host_has_gpu() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def load_report(cache: Cache, image_id: str) -> dict[str, Any] | None:
    path = cache.acceptance_report(image_id)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise ConfigError(
            f"{path}: acceptance report is not valid JSON", hint="re-run `verlenv accept-image`"
        ) from None


def profile_image(paths: ProjectPaths, profile: str) -> str:
    """The image built from the profile's current lock: verlenv/<profile>:<lock sha256[:12]>."""
    # imported here: a GPU host with no engine stores its reports with this module, and no build stack
    from verlenv.image.build import image_repository
    from verlenv.lock.lockfile import read_lock

    lock = read_lock(paths.lock(profile))
    return f"{image_repository(profile)}:{lock.sha256[:12]}"


def accept_image(
    paths: ProjectPaths, profile: str, cache: Cache, *, image: str = "", gpus: str = "auto", args: tuple[str, ...] = ()
) -> tuple[dict[str, Any], Path]:
    import docker.errors
    from docker.types import DeviceRequest

    from verlenv.image.services import ensure_engine

    engine = ensure_engine()
    reference = image or profile_image(paths, profile)
    try:
        image_id = str(engine.images.get(reference).id)
    except docker.errors.ImageNotFound:
        raise ConfigError(f"no image {reference}", hint=f"build it first: verlenv build --profile {profile}") from None
    use_gpu = gpus == "all" or (gpus == "auto" and host_has_gpu())
    requests = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if use_gpu else []
    command = ["verlenv", "accept", "--json", "-q", "--report", "/tmp/acceptance.json", *args]
    container = engine.containers.run(
        reference,
        command,
        detach=True,
        network_mode="none",
        shm_size=SHM_SIZE,
        device_requests=requests,
        environment={"VERLENV_IMAGE_ID": image_id, "VERLENV_PROFILE": profile},
    )
    try:
        status = container.wait(timeout=3600)
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    try:
        report = json.loads(stdout)
    except ValueError:
        tail = "\n".join(stderr.strip().splitlines()[-20:])
        raise CheckFailed(
            f"the acceptance run in {reference} produced no report (exit {status['StatusCode']}):\n{tail}"
        ) from None
    report["gpus_requested"] = use_gpu
    # The container is the image: its tree is the image's per-file manifest, which the build recorded.
    report["files_manifest_sha256"] = built_files_sha256(cache, image_id)
    report["ran_in"] = {"runner": "docker"}
    return report, store_report(cache, report)


def built_files_sha256(cache: Cache, image_id: str) -> str:
    """The digest of the per-file manifest the build recorded for ``image_id`` ("" if this cache lacks it)."""
    from verlenv.image.build import files_manifest_path
    from verlenv.image.filemanifest import FileManifest

    path = files_manifest_path(cache, image_id)
    return FileManifest.read(path).sha256 if path.is_file() else ""


def store_report(cache: Cache, report: dict[str, Any]) -> Path:
    """Keep a report where publish looks for it: <cache>/acceptance/<image-id>.json."""
    image_id = str(report.get("image_id", ""))
    if not image_id.startswith("sha256:"):
        raise ConfigError("the acceptance report names no image ID (sha256:...)")
    target = cache.acceptance_report(image_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(target, json.dumps(report, indent=2) + "\n")
    return target
