"""Verify a catalog entry over HTTP, with no Docker engine, then say how enroot / apptainer fetch it.

A cluster node is not root and has no engine; it must still refuse an image that is not the one
the catalog vouches for before a container runtime unpacks it. In order, each step on bytes whose
sha256 was checked: the manifest by digest; its config blob, whose digest is the image ID; the
config's io.verlenv.* labels against the catalog; the acceptance attachment, which must pass for
this image ID. Only then are the enroot / apptainer lines for that digest handed out.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from verlenv.errors import CheckFailed, IntegrityError
from verlenv.release import catalog
from verlenv.release.attachment import Attachment, attachment_tag, read_attachment
from verlenv.release.regclient import RegistryClient
from verlenv.release.registry import split_reference
from verlenv.release.regtls import Endpoint

IMAGE_MANIFESTS = ("application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json")
FILES_MANIFEST_LABEL = "io.verlenv.files-manifest-sha256"


@dataclass(frozen=True)
class ToolCommand:
    """A command line for a cluster node: environment assignments, then argv."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def line(self) -> str:
        return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in self.env), *map(shlex.quote, self.argv)])


@dataclass(frozen=True)
class Verified:
    entry: catalog.Entry
    endpoint: Endpoint
    image_id: str
    labels: dict[str, str]
    acceptance: dict[str, Any]
    attachment_digest: str

    @property
    def enroot(self) -> ToolCommand:
        return enroot_command(self.entry, self.endpoint)

    @property
    def apptainer(self) -> ToolCommand:
        return apptainer_command(self.entry, self.endpoint)


def verify(entry: catalog.Entry, client: RegistryClient) -> Verified:
    """Every check, in order; the first that fails raises (IntegrityError or CheckFailed)."""
    _, repository = split_reference(entry.repository)
    manifest = client.get_manifest(repository, entry.digest).parsed()  # re-hashed by the client
    config_digest = _config_digest(manifest, entry)
    if config_digest != entry.image_id:
        raise IntegrityError(
            f"{entry.by_digest} is image {config_digest}, the catalog says {entry.image_id}",
            hint="the catalog and the registry disagree: republish, or use the catalog that goes with this registry",
        )
    config = _json_object(client.get_blob(repository, config_digest), f"config {config_digest}")
    labels = dict((config.get("config") or {}).get("Labels") or {})
    check_labels(labels, entry)
    found = read_attachment(client, repository, entry.digest)
    report = check_attachment(found, entry, labels)
    return Verified(entry, client.endpoint, config_digest, labels, report, found.manifest_digest if found else "")


def _config_digest(manifest: dict[str, Any], entry: catalog.Entry) -> str:
    media_type = manifest.get("mediaType", "")
    if media_type and media_type not in IMAGE_MANIFESTS:
        raise CheckFailed(f"{entry.by_digest} is a {media_type}, not a single image manifest")
    digest = (manifest.get("config") or {}).get("digest")
    if not digest:
        raise CheckFailed(f"{entry.by_digest} has no config descriptor")
    return str(digest)


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(data)
    except ValueError:
        raise CheckFailed(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise CheckFailed(f"{what} is not a JSON object")
    return value


def check_labels(labels: dict[str, str], entry: catalog.Entry) -> None:
    """The image's io.verlenv.* labels against the catalog: lock sha256, components, recorded labels."""
    if labels.get("io.verlenv.lock-sha256") != entry.lock_sha256:
        raise CheckFailed(
            f"{entry.by_digest}: label lock-sha256 {labels.get('io.verlenv.lock-sha256')} does not match "
            f"the catalog's {entry.lock_sha256}"
        )
    # components and recorded labels each on their own: a catalog whose two disagree fails too
    wanted = [(f"io.verlenv.{k}", v) for k, v in sorted(entry.components.items())]
    # the per-file manifest digest is the catalog's own fact (an image cannot label its own files):
    # it is checked against the attached report instead
    wanted += [
        (k, v) for k, v in sorted(entry.labels.items()) if k.startswith("io.verlenv.") and k != FILES_MANIFEST_LABEL
    ]
    wrong = {k: (labels.get(k), v) for k, v in wanted if labels.get(k) != v}
    if wrong:
        raise CheckFailed(
            f"{entry.by_digest}: labels differ from the catalog: "
            + ", ".join(f"{k.removeprefix('io.verlenv.')} {got} != {want}" for k, (got, want) in wrong.items())
        )


def check_attachment(found: Attachment | None, entry: catalog.Entry, labels: dict[str, str]) -> dict[str, Any]:
    """The attached report must exist, vouch for this digest, pass, and name this image ID."""
    where = f"{entry.repository}:{attachment_tag(entry.digest)}"
    if found is None:
        raise CheckFailed(f"no acceptance report is attached to {entry.by_digest} (looked for {where})")
    report = found.report
    if found.vouches_for and found.vouches_for != entry.digest:
        raise CheckFailed(f"the acceptance attachment {where} vouches for {found.vouches_for}, not {entry.digest}")
    if report.get("image_id") != entry.image_id:
        raise CheckFailed(
            f"the acceptance report at {where} is for image {report.get('image_id')}, not {entry.image_id}"
        )
    if report.get("passed") is not True:
        failed = [str(v.get("name")) for v in report.get("verdicts", []) if isinstance(v, dict) and not v.get("passed")]
        raise CheckFailed(
            f"the acceptance report at {where} did not pass ({', '.join(failed) or 'passed is not true'})"
        )
    _check_files_manifest(report, entry, labels, where)
    return report


def _check_files_manifest(report: dict[str, Any], entry: catalog.Entry, labels: dict[str, str], where: str) -> None:
    """Optional: older reports and images carry no files-manifest hash; when both sides do, they agree."""
    reported = report.get("files_manifest_sha256")
    if not reported:
        return
    for source, value in (
        ("image label", labels.get(FILES_MANIFEST_LABEL)),
        ("catalog", entry.labels.get(FILES_MANIFEST_LABEL)),
    ):
        if value and value != reported:
            raise CheckFailed(
                f"the acceptance report at {where} saw files manifest {reported}, the {source} says {value}"
            )


def enroot_command(entry: catalog.Entry, endpoint: Endpoint) -> ToolCommand:
    """``enroot import -o NAME.sqsh 'docker://HOST#REPO:sha256:HEX'``.

    enroot's URI is ``docker://[USER@][REGISTRY#]IMAGE[:TAG]``
    (https://github.com/NVIDIA/enroot/blob/master/doc/cmd/import.md). The digest goes in the TAG
    place: enroot 3.x's TAG pattern ``[[:alnum:]._:-]+`` admits ``sha256:HEX`` and it fetches
    ``/v2/IMAGE/manifests/TAG``, while ``IMAGE@sha256:`` only parses from enroot 4.0 on
    (src/docker.sh, docker::_parse_uri). ``ENROOT_ALLOW_HTTP`` (same page, Configuration) is the
    only way enroot speaks plain HTTP; any value but no/false turns it on.
    """
    host, _, path = entry.repository.partition("/")
    env = (("ENROOT_ALLOW_HTTP", "yes"),) if endpoint.scheme == "http" else ()
    argv = ("enroot", "import", "-o", f"{_file_stem(entry)}.sqsh", f"docker://{host}#{path}:{entry.digest}")
    return ToolCommand(argv, env)


def apptainer_command(entry: catalog.Entry, endpoint: Endpoint) -> ToolCommand:
    """``apptainer pull NAME.sif docker://HOST/REPO@sha256:HEX``.

    Syntax ``apptainer pull [pull options...] [output file] <URI>``, man page apptainer-pull(1)
    (https://manpages.ubuntu.com/manpages/questing/man1/apptainer-pull.1.html). The output file is
    named here because apptainer would derive ``REPO@sha256_HEX.sif`` from a digest reference.
    Plain HTTP: the man page's ``--no-https`` (Singularity spelled it ``--nohttps``), or the
    environment variable ``APPTAINER_NOHTTPS=true``, documented in apptainer-userdocs appendix.rst
    (https://github.com/apptainer/apptainer-userdocs/blob/main/appendix.rst); the environment form
    keeps one line shape for both schemes, as ENROOT_ALLOW_HTTP does for enroot.
    """
    env = (("APPTAINER_NOHTTPS", "true"),) if endpoint.scheme == "http" else ()
    return ToolCommand(("apptainer", "pull", f"{_file_stem(entry)}.sif", f"docker://{entry.by_digest}"), env)


def _file_stem(entry: catalog.Entry) -> str:
    return f"{entry.profile}-{entry.digest.removeprefix('sha256:')[:12]}"
