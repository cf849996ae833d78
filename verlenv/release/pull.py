"""Cluster side: resolve a profile or tag through the catalog, pull by digest, re-check everything."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from typing import Any

from verlenv.errors import CheckFailed, ConfigError, IntegrityError, ServiceError
from verlenv.image.services import ensure_engine
from verlenv.release import catalog


@dataclass(frozen=True)
class Pulled:
    entry: catalog.Entry
    image_id: str
    acceptance: dict[str, Any]

    @property
    def apptainer(self) -> str:
        return f"apptainer pull docker://{self.entry.by_digest}"

    @property
    def enroot(self) -> str:
        host, _, path = self.entry.repository.partition("/")
        return f"enroot import 'docker://{host}#{path}@{self.entry.digest}'"


def pull(name_or_tag: str, source: str) -> Pulled:
    entry = catalog.find(catalog.read(source), name_or_tag)
    engine = ensure_engine()
    image = _pull(engine, entry.by_digest)
    if image.id != entry.image_id:
        raise IntegrityError(f"{entry.by_digest} is image {image.id[:19]}, the catalog says {entry.image_id[:19]}")
    _check_labels(image.labels, entry)
    report = _acceptance(engine, entry)
    return Pulled(entry, image.id, report)


def _pull(engine, reference: str):  # type: ignore[no-untyped-def]
    import docker.errors

    try:
        return engine.images.pull(reference)
    except docker.errors.APIError as exc:
        raise ServiceError(f"cannot pull {reference}: {exc.explanation or exc}") from None


def _check_labels(labels: dict[str, str], entry: catalog.Entry) -> None:
    if labels.get("io.verlenv.lock-sha256") != entry.lock_sha256:
        raise CheckFailed(
            f"{entry.by_digest}: label lock-sha256 {labels.get('io.verlenv.lock-sha256')} does not match "
            f"the catalog's {entry.lock_sha256}"
        )
    wrong = {
        k: (labels.get(f"io.verlenv.{k}"), v) for k, v in entry.components.items() if labels.get(f"io.verlenv.{k}") != v
    }
    if wrong:
        raise CheckFailed(
            f"{entry.by_digest}: labels differ from the catalog: "
            + ", ".join(f"{k} {got} != {want}" for k, (got, want) in wrong.items())
        )


def _acceptance(engine, entry: catalog.Entry) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    attachment = _pull(engine, f"{entry.repository}:{entry.attachment}")
    if attachment.labels.get("io.verlenv.acceptance-for") != entry.digest:
        raise CheckFailed(
            f"the acceptance attachment {entry.attachment} vouches for "
            f"{attachment.labels.get('io.verlenv.acceptance-for')}, not {entry.digest}"
        )
    container = engine.api.create_container(attachment.id, command="unused")
    try:
        stream, _ = engine.api.get_archive(container["Id"], "/acceptance.json")
        data = b"".join(stream)
    finally:
        engine.api.remove_container(container["Id"], force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        handle = tar.extractfile("acceptance.json")
        report = json.loads(handle.read()) if handle else {}
    if not report.get("passed") or report.get("image_id") != entry.image_id:
        raise CheckFailed(f"the attached acceptance report does not show a pass for image {entry.image_id[:19]}")
    return report


def run_tool(command: str) -> None:
    tool = command.split()[0]
    if shutil.which(tool) is None:
        raise ConfigError(f"{tool} is not installed here", hint=f"run it on a cluster node: {command}")
    proc = subprocess.run(shlex.split(command), check=False)
    if proc.returncode != 0:
        raise ServiceError(f"`{command}` failed with exit {proc.returncode}")
