"""Which scheme and which CA a registry connection uses, decided once and said in every error.

https by default. The CA comes from the caller, else ``VERLENV_REGISTRY_CA``, else Docker's own
per-registry directory (``/etc/docker/certs.d/HOST[:PORT]/ca.crt``, with ``client.cert`` /
``client.key`` beside it for mutual TLS, as dockerd reads them), else the system store. Plain
HTTP is used only when asked for (``http://HOST`` or ``insecure=True``) or, for a loopback host
only, when https cannot even connect: a test registry on 127.0.0.1 speaks plain HTTP, and nothing
on loopback crosses a wire an attacker could sit on.
"""

from __future__ import annotations

import http.client
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

CA_ENV = "VERLENV_REGISTRY_CA"
DOCKER_CERTS_D = Path("/etc/docker/certs.d")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Endpoint:
    host: str  # HOST[:PORT], as in image references
    scheme: str  # "https" or "http"
    ca: str = ""  # the CA bundle used for https; "" = the system store
    client_cert: str = ""  # Docker's certs.d client.cert, when present

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}"

    def describe(self) -> str:
        if self.scheme == "http":
            return f"http://{self.host} (plain HTTP)"
        return f"https://{self.host} (CA: {self.ca or 'the system store'})"

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca or None)
        if self.client_cert:
            context.load_cert_chain(self.client_cert, str(Path(self.client_cert).with_name("client.key")))
        return context

    def connection(self, host: str = "", scheme: str = "", timeout: float = 60.0) -> http.client.HTTPConnection:
        """A connection to this endpoint (or to another host/scheme, for a redirect or a token realm)."""
        host, scheme = host or self.host, scheme or self.scheme
        block = 1 << 20  # sending a multi-GB layer 8 KiB at a time costs real CPU
        if scheme == "http":
            return http.client.HTTPConnection(host, timeout=timeout, blocksize=block)
        return http.client.HTTPSConnection(host, timeout=timeout, context=self.context(), blocksize=block)


def split_scheme(registry: str) -> tuple[str, str]:
    """'http://127.0.0.1:5000' -> ('http', '127.0.0.1:5000'); a bare host has no scheme ('')."""
    for scheme in ("https", "http"):
        if registry.startswith(f"{scheme}://"):
            return scheme, registry[len(scheme) + 3 :].rstrip("/")
    return "", registry.rstrip("/")


def hostname(host: str) -> str:
    """'127.0.0.1:5000' -> '127.0.0.1'; '[::1]:5000' -> '::1'."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback(host: str) -> bool:
    return hostname(host) in LOOPBACK_NAMES


def https_endpoint(host: str, ca_cert: str | Path | None = None) -> Endpoint:
    """The https endpoint for host with its CA chosen: argument, env, Docker's certs.d, system store."""
    certs_d = DOCKER_CERTS_D / host
    if ca_cert:
        ca = str(ca_cert)
    elif os.environ.get(CA_ENV):
        ca = os.environ[CA_ENV]
    else:
        ca = str(certs_d / "ca.crt") if (certs_d / "ca.crt").is_file() else ""
    client = certs_d / "client.cert"
    usable = client.is_file() and client.with_name("client.key").is_file()
    return Endpoint(host, "https", ca, str(client) if usable else "")


def ca_problem(endpoint: Endpoint) -> str:
    """Why the CA cannot be used, or '' when it can (a missing file is a usage error, not a TLS one)."""
    if endpoint.ca and not Path(endpoint.ca).is_file():
        return f"the CA file {endpoint.ca} does not exist"
    return ""


def fallback_allowed(error: OSError) -> bool:
    """https failed in a way that means 'nothing speaks TLS here', not 'someone failed to prove who they are'."""
    return not isinstance(error, ssl.SSLCertVerificationError)
