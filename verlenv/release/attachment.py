"""The acceptance report as a registry attachment: its format, and reading it back over HTTP.

An attachment is an OCI image manifest tagged ``sha256-<hex>.acceptance`` after the digest it
vouches for (the tag scheme of cosign and of the OCI referrers fallback, which registries without
the referrers API, Distribution 2.8 among them, still serve):

- ``config``: ``application/vnd.verlenv.acceptance.config.v1+json``, a small JSON object naming
  the subject digest, the image ID and the verdict;
- one layer: ``application/vnd.verlenv.acceptance.report.v1+json``, the report itself;
- ``annotations``: ``io.verlenv.acceptance-for`` / ``-image-id`` / ``-passed``, and ``subject``:
  the image manifest's descriptor, so a registry that has the referrers API lists it there too.

Engine-made attachments (publish through dockerd: a FROM-scratch image with
``/acceptance.json`` and the same keys as labels) are read too, so catalogs published before
the HTTP path keep verifying.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from dataclasses import dataclass
from typing import Any

from verlenv.errors import CheckFailed
from verlenv.release.regclient import Manifest, RegistryClient, sha256_digest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.verlenv.acceptance.config.v1+json"
REPORT_MEDIA_TYPE = "application/vnd.verlenv.acceptance.report.v1+json"
FOR, IMAGE_ID, PASSED = "io.verlenv.acceptance-for", "io.verlenv.acceptance-image-id", "io.verlenv.acceptance-passed"


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Attachment:
    report: dict[str, Any]
    vouches_for: str  # the digest named in its annotations (or labels)
    manifest_digest: str
    form: str  # "oci-artifact" or "engine-image"


def attachment_tag(digest: str) -> str:
    """Same scheme as verlenv.release.publish.attachment_tag (a test keeps them equal)."""
    return f"{digest.replace(':', '-')}.acceptance"


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, one trailing newline: the same value always gives the same digest."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def blobs(subject: str, report: dict[str, Any]) -> tuple[bytes, bytes]:
    """(config, report layer) bytes of the attachment for ``subject``."""
    config = {
        "schema_version": 1,
        "acceptance_for": subject,
        "image_id": report.get("image_id"),
        "passed": report.get("passed"),
    }
    return canonical_json(config), canonical_json(report)


def manifest(subject: Descriptor, config: bytes, layer: bytes, report: dict[str, Any]) -> bytes:
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": Descriptor(CONFIG_MEDIA_TYPE, sha256_digest(config), len(config)).as_json(),
        "layers": [
            {
                **Descriptor(REPORT_MEDIA_TYPE, sha256_digest(layer), len(layer)).as_json(),
                "annotations": {"org.opencontainers.image.title": "acceptance.json"},
            }
        ],
        "subject": subject.as_json(),
        "annotations": {
            FOR: subject.digest,
            IMAGE_ID: str(report.get("image_id", "")),
            PASSED: str(bool(report.get("passed"))).lower(),
        },
    }
    return json.dumps(body, indent=3).encode()


def read_attachment(client: RegistryClient, repository: str, subject: str) -> Attachment | None:
    """The attachment for ``subject`` (every blob verified), None when the registry has none."""
    found = client.find_manifest(repository, attachment_tag(subject))
    if found is None:
        return None
    body = found.parsed()
    layers = body.get("layers") or []
    if body.get("config", {}).get("mediaType") == CONFIG_MEDIA_TYPE and len(layers) == 1:
        return _artifact(client, repository, found, body)
    return _engine_image(client, repository, found, body)


def _artifact(client: RegistryClient, repository: str, found: Manifest, body: dict[str, Any]) -> Attachment:
    data = client.get_blob(repository, body["layers"][0]["digest"])
    vouches = (body.get("annotations") or {}).get(FOR, "")
    return Attachment(_report(data, found), vouches, found.digest, "oci-artifact")


def _engine_image(client: RegistryClient, repository: str, found: Manifest, body: dict[str, Any]) -> Attachment:
    config = json.loads(client.get_blob(repository, body["config"]["digest"]))
    labels = (config.get("config") or {}).get("Labels") or {}
    for layer in body.get("layers") or []:
        data = _acceptance_json(client.get_blob(repository, layer["digest"]))
        if data is not None:
            return Attachment(_report(data, found), labels.get(FOR, ""), found.digest, "engine-image")
    raise CheckFailed(f"the acceptance attachment {found.digest} holds no acceptance.json")


def _acceptance_json(layer: bytes) -> bytes | None:
    raw = gzip.decompress(layer) if layer[:2] == b"\x1f\x8b" else layer
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.name.lstrip("./") == "acceptance.json" and member.isfile():
                handle = tar.extractfile(member)
                return handle.read() if handle else None
    return None


def _report(data: bytes, found: Manifest) -> dict[str, Any]:
    try:
        report = json.loads(data)
    except ValueError:
        raise CheckFailed(f"the acceptance attachment {found.digest} does not hold a JSON report") from None
    if not isinstance(report, dict):
        raise CheckFailed(f"the acceptance attachment {found.digest} does not hold a JSON object")
    return report
