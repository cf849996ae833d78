"""Cluster side: resolve a profile or tag through the catalog, verify it over HTTP, optionally pull it.

Verification needs no engine and always runs first (httppull: manifest by digest, config = image
ID, labels, acceptance attachment). Only a Docker pull asked for (``engine=True``, or
``docker=True`` when an engine answers) talks to dockerd, and its image ID must equal the one just
verified. Without that, ``ensure_engine`` is never called: a cluster node has no engine and no root.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.errors import ConfigError, IntegrityError, ServiceError
from verlenv.image.services import engine_answers, ensure_engine
from verlenv.release import catalog, httppull
from verlenv.release.httppull import ToolCommand, check_labels
from verlenv.release.regclient import RegistryClient
from verlenv.release.registry import split_reference
from verlenv.release.regtls import Endpoint

TOOLS = ("enroot", "apptainer")


@dataclass(frozen=True)
class Pulled:
    entry: catalog.Entry
    image_id: str
    acceptance: dict[str, Any]
    endpoint: Endpoint | None = None  # how the registry was reached for the checks
    engine_pulled: bool = False

    @property
    def scheme(self) -> str:
        return self.endpoint.scheme if self.endpoint else "https"

    def command(self, tool: str) -> ToolCommand:
        endpoint = self.endpoint or Endpoint(self.entry.repository.partition("/")[0], "https")
        if tool == "enroot":
            return httppull.enroot_command(self.entry, endpoint)
        return httppull.apptainer_command(self.entry, endpoint)

    @property
    def apptainer(self) -> str:
        return self.command("apptainer").line

    @property
    def enroot(self) -> str:
        return self.command("enroot").line


def pull(
    name_or_tag: str,
    source: str,
    *,
    engine: bool = False,
    docker: bool = False,
    ca_cert: str | Path | None = None,
    insecure: bool = False,
) -> Pulled:
    entry = catalog.find(catalog.read(source), name_or_tag)
    host, _ = split_reference(entry.repository)
    client = RegistryClient(host, ca_cert=ca_cert, insecure=insecure)
    verified = httppull.verify(entry, client)
    use_engine = engine or (docker and engine_answers())
    if use_engine:
        _engine_pull(entry, verified.image_id)
    return Pulled(entry, verified.image_id, verified.acceptance, verified.endpoint, engine_pulled=use_engine)


def _engine_pull(entry: catalog.Entry, verified_id: str) -> None:
    import docker.errors

    client = ensure_engine()
    try:
        image = client.images.pull(entry.by_digest)
    except docker.errors.APIError as exc:
        raise ServiceError(f"cannot pull {entry.by_digest}: {exc.explanation or exc}") from None
    finally:
        client.close()
    if image.id != verified_id:
        raise IntegrityError(
            f"the engine pulled {entry.by_digest} as image {image.id}, verified over HTTP: {verified_id}"
        )
    check_labels(image.labels, entry)


def run_tool(command: ToolCommand | str) -> None:
    """Run an enroot / apptainer line (only ever called after every check passed)."""
    if isinstance(command, str):
        command = ToolCommand(tuple(shlex.split(command)))
    tool = command.argv[0]
    if shutil.which(tool) is None:
        raise ConfigError(f"{tool} is not installed here", hint=f"run it on a cluster node: {command.line}")
    proc = subprocess.run(list(command.argv), env={**os.environ, **dict(command.env)}, check=False)
    if proc.returncode != 0:
        raise ServiceError(f"`{command.line}` failed with exit {proc.returncode}")
