"""Talking to a registry over its HTTP API: manifest digests, for read-back after a push."""

from __future__ import annotations

import urllib.error
import urllib.request

from verlenv.errors import ServiceError

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def split_reference(registry: str) -> tuple[str, str]:
    """'127.0.0.1:5000/team/verlenv' -> ('127.0.0.1:5000', 'team/verlenv')."""
    host, _, repository = registry.partition("/")
    if not host or not repository:
        from verlenv.errors import ConfigError

        raise ConfigError(f"--registry '{registry}' must look like HOST[:PORT]/REPOSITORY")
    return host, repository


def manifest_digest(host: str, repository: str, tag: str, scheme: str = "http") -> str:
    """The registry's own digest for repository:tag (Docker-Content-Digest of a HEAD request)."""
    request = urllib.request.Request(
        f"{scheme}://{host}/v2/{repository}/manifests/{tag}", method="HEAD", headers={"Accept": MANIFEST_TYPES}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            digest = response.headers.get("Docker-Content-Digest", "")
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceError(f"registry {host} did not answer for {repository}:{tag}: {exc}") from None
    if not digest:
        raise ServiceError(f"registry {host} sent no Docker-Content-Digest for {repository}:{tag}")
    return digest
