"""Engine housekeeping shared by the integration fixtures."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors


def forget_registry_tags(engine, host: str) -> None:  # type: ignore[no-untyped-def]
    """Untag what publish/pull tagged for a test registry once it is gone, so runs do not pile up tags."""
    for image in engine.images.list():
        for ref in [*image.tags, *image.attrs.get("RepoDigests", [])]:
            # A digest reference goes with the image when its last tag does.
            if ref.startswith(f"{host}/"):
                with contextlib.suppress(docker.errors.ImageNotFound):
                    engine.images.remove(ref)


@contextlib.contextmanager
def scratch_registry(engine, storage: Path) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """A Distribution registry on 127.0.0.1:<free port> storing in ``storage``; afterwards stopped,
    its tags forgotten and its storage removed (~0.7 GiB a push: a CI disk filled up with them)."""
    from verlenv.image import services

    reg = services.start_registry(storage)
    try:
        yield reg
    finally:
        reg.stop()
        forget_registry_tags(engine, reg.host)
        shutil.rmtree(storage, ignore_errors=True)


def legacy_attachment(engine, repository: str, digest: str, image_id: str, report: dict[str, Any]) -> str:  # type: ignore[no-untyped-def]
    """Push a report the way publish did before the HTTP path: a FROM-scratch image holding
    /acceptance.json, labelled after the digest it vouches for. Returns its tag."""
    from verlenv.release.attachment import FOR, IMAGE_ID, PASSED, attachment_tag

    tag = attachment_tag(digest)
    labels = f"{FOR}={digest} {IMAGE_ID}={image_id} {PASSED}={str(report['passed']).lower()}"
    dockerfile = f"FROM scratch\nCOPY acceptance.json /acceptance.json\nLABEL {labels}\n".encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("acceptance.json", json.dumps(report).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    image, _ = engine.images.build(fileobj=buffer, custom_context=True, network_mode="none", rm=True)
    image.tag(repository, tag)
    for line in engine.images.push(repository, tag=tag, stream=True, decode=True):
        if "error" in line:
            raise RuntimeError(line["error"])
    return tag
