"""Engine housekeeping shared by the integration fixtures."""

from __future__ import annotations


def forget_registry_tags(engine, host: str) -> None:  # type: ignore[no-untyped-def]
    """Untag what publish/pull tagged for a test registry once it is gone, so runs do not pile up tags."""
    for image in engine.images.list():
        for ref in [*image.tags, *image.attrs.get("RepoDigests", [])]:
            if ref.startswith(f"{host}/"):
                engine.images.remove(ref)
