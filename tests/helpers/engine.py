"""Engine housekeeping shared by the integration fixtures."""

from __future__ import annotations

import contextlib

import docker.errors


def forget_registry_tags(engine, host: str) -> None:  # type: ignore[no-untyped-def]
    """Untag what publish/pull tagged for a test registry once it is gone, so runs do not pile up tags."""
    for image in engine.images.list():
        for ref in [*image.tags, *image.attrs.get("RepoDigests", [])]:
            # A digest reference goes with the image when its last tag does.
            if ref.startswith(f"{host}/"):
                with contextlib.suppress(docker.errors.ImageNotFound):
                    engine.images.remove(ref)
