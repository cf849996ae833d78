"""A client for one registry over the Distribution HTTP API, with the standard library only.

Cluster nodes verify images with this before `enroot import` / `apptainer pull`, so it needs no
Docker engine, no root and no third-party package. Everything that arrives is hashed against the
digest it was asked for: a manifest fetched by digest, every blob. A manifest PUT must come back
with the digest of the bytes sent. Authentication follows the registry's 401 challenge (Basic, or
a Bearer token from the realm it names, cached per scope); credentials come from regauth and are
never printed. Which scheme and CA were used is in every connection error (regtls).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.errors import ConfigError, IntegrityError, ServiceError
from verlenv.release.regauth import (
    PASSWORD_ENV,
    USERNAME_ENV,
    Challenge,
    Credentials,
    docker_config_path,
    find_credentials,
    parse_challenge,
)
from verlenv.release.registry import MANIFEST_TYPES
from verlenv.release.regtls import (
    CA_ENV,
    Endpoint,
    ca_problem,
    fallback_allowed,
    https_endpoint,
    is_loopback,
    split_scheme,
)

Body = bytes | Path | None
SMALL_BLOB_LIMIT = 64 << 20  # get_blob keeps a blob in memory; layers go through download_blob
CHUNK = 1 << 20
REDIRECTS = (301, 302, 303, 307, 308)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_digest(reference: str) -> bool:
    return reference.startswith("sha256:")


@dataclass(frozen=True)
class Manifest:
    data: bytes  # exactly as the registry sent it: its sha256 is the digest
    media_type: str
    digest: str

    def parsed(self) -> dict[str, Any]:
        try:
            value = json.loads(self.data)
        except ValueError as exc:
            raise IntegrityError(f"manifest {self.digest} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise IntegrityError(f"manifest {self.digest} is not a JSON object")
        return value


class RegistryClient:
    """One registry host. ``registry`` is HOST[:PORT], or http(s)://HOST[:PORT] to fix the scheme."""

    def __init__(
        self,
        registry: str,
        *,
        ca_cert: str | Path | None = None,
        insecure: bool = False,
        credentials: Credentials | None = None,
        timeout: float = 60.0,
    ) -> None:
        scheme, self.host = split_scheme(registry)
        self._plain_http = scheme == "http" or insecure
        self._ca_cert = ca_cert
        self._credentials = credentials
        self._credentials_looked_up = credentials is not None
        self._endpoint: Endpoint | None = None
        self._tokens: dict[str, str] = {}  # request scope -> bearer token
        self._basic = False
        self.timeout = timeout

    # --- the registry API -------------------------------------------------------------------

    @property
    def endpoint(self) -> Endpoint:
        return self._resolve()

    def ping(self) -> Endpoint:
        """GET /v2/ with whatever authentication it asks for; the endpoint that answered."""
        with self._exchange("GET", "/v2/", scope="") as response:
            self._expect(response, (200,), "GET /v2/")
        return self.endpoint

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """The registry's Docker-Content-Digest for a tag or digest (HEAD), None when unknown."""
        path = f"/v2/{repository}/manifests/{reference}"
        with self._exchange("HEAD", path, scope=_scope(repository), headers={"Accept": MANIFEST_TYPES}) as response:
            if response.status == 404:
                return None
            self._expect(response, (200,), f"HEAD {self._ref(repository, reference)}")
            digest = response.getheader("Docker-Content-Digest", "")
        if not digest:
            raise ServiceError(f"registry {self.host} sent no Docker-Content-Digest for {repository}:{reference}")
        return digest

    def find_manifest(self, repository: str, reference: str) -> Manifest | None:
        """GET a manifest (None when the registry does not have it); by digest it is re-hashed."""
        path = f"/v2/{repository}/manifests/{reference}"
        with self._exchange("GET", path, scope=_scope(repository), headers={"Accept": MANIFEST_TYPES}) as response:
            if response.status == 404:
                response.read()
                return None
            self._expect(response, (200,), f"GET {self._ref(repository, reference)}")
            data = response.read()
            announced = response.getheader("Docker-Content-Digest", "")
            media_type = response.getheader("Content-Type", "")
        actual = sha256_digest(data)
        expected = reference if is_digest(reference) else announced or actual
        if actual != expected:
            raise IntegrityError(
                f"manifest {self._ref(repository, reference)} does not match its digest: expected {expected}, "
                f"the bytes received hash to {actual}",
                hint="the registry's storage or something between us and it altered the manifest; do not use it",
            )
        return Manifest(data, media_type, actual)

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        manifest = self.find_manifest(repository, reference)
        if manifest is None:
            raise ServiceError(f"registry {self.host} has no manifest {self._ref(repository, reference)}")
        return manifest

    def put_manifest(self, repository: str, reference: str, data: bytes, media_type: str) -> str:
        """PUT a manifest under a tag (or its digest); the registry's digest must be sha256 of ``data``."""
        path = f"/v2/{repository}/manifests/{reference}"
        headers = {"Content-Type": media_type}
        with self._exchange("PUT", path, scope=_scope(repository, push=True), headers=headers, body=data) as response:
            self._expect(response, (201,), f"PUT {self._ref(repository, reference)}")
            digest = response.getheader("Docker-Content-Digest", "")
        sent = sha256_digest(data)
        if digest != sent:
            raise IntegrityError(
                f"registry {self.host} stored {repository}:{reference} as {digest or 'no digest'}, "
                f"but the manifest sent hashes to {sent}",
                hint="a proxy or the registry rewrote the manifest; the digest would not be reproducible",
            )
        return digest

    def blob_exists(self, repository: str, digest: str) -> bool:
        with self._exchange("HEAD", f"/v2/{repository}/blobs/{digest}", scope=_scope(repository)) as response:
            if response.status == 404:
                return False
            self._expect(response, (200, *REDIRECTS), f"HEAD blob {self._ref(repository, digest)}")
        return True

    def get_blob(self, repository: str, digest: str, limit: int = SMALL_BLOB_LIMIT) -> bytes:
        """A small blob (a config, a report) in memory, verified against its digest."""
        hasher, parts, size = hashlib.sha256(), [], 0
        for chunk in self._blob_chunks(repository, digest):
            size += len(chunk)
            if size > limit:
                raise ServiceError(f"blob {self._ref(repository, digest)} is larger than {limit} bytes")
            hasher.update(chunk)
            parts.append(chunk)
        self._check_blob(repository, digest, "sha256:" + hasher.hexdigest())
        return b"".join(parts)

    def download_blob(self, repository: str, digest: str, target: Path) -> Path:
        """Stream a blob to ``target`` (written only once verified, so no half file is left there)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        hasher = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as handle:
            temp = Path(handle.name)
            try:
                for chunk in self._blob_chunks(repository, digest):
                    hasher.update(chunk)
                    handle.write(chunk)
                self._check_blob(repository, digest, "sha256:" + hasher.hexdigest())
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
        temp.replace(target)
        return target

    def upload_blob(self, repository: str, digest: str, source: bytes | Path, mount_from: str = "") -> bool:
        """Upload a blob unless the repository has it; False when nothing had to be sent.

        ``source`` is bytes or a file, streamed with its length so a multi-GB layer never sits in
        memory. ``mount_from`` names a repository on the same registry to mount the blob from.
        """
        if self.blob_exists(repository, digest):
            return False
        location = self._start_upload(repository, digest, mount_from)
        if location is None:  # the mount did it
            return True
        query = "&" if "?" in location else "?"
        target = f"{location}{query}digest={urllib.parse.quote(digest)}"
        headers = {"Content-Type": "application/octet-stream"}
        scope = _scope(repository, push=True)
        with self._exchange("PUT", target, scope=scope, headers=headers, body=source) as response:
            self._expect(response, (201,), f"upload of {self._ref(repository, digest)}")
            stored = response.getheader("Docker-Content-Digest", digest)
        if stored != digest:
            raise IntegrityError(f"registry {self.host} stored the upload of {digest} as {stored}")
        return True

    # --- uploads ----------------------------------------------------------------------------

    def _start_upload(self, repository: str, digest: str, mount_from: str) -> str | None:
        """POST blobs/uploads/ (as a mount when asked); the absolute upload URL, None if mounted."""
        query = f"?mount={urllib.parse.quote(digest)}&from={urllib.parse.quote(mount_from)}" if mount_from else ""
        path = f"/v2/{repository}/blobs/uploads/{query}"
        with self._exchange("POST", path, scope=_scope(repository, push=True)) as response:
            self._expect(response, (201, 202), f"starting the upload of {self._ref(repository, digest)}")
            if response.status == 201:
                return None
            location = response.getheader("Location", "")
        if not location:
            raise ServiceError(f"registry {self.host} started an upload without a Location header")
        # Distribution answers with an absolute URL, other registries with a path: join either way.
        return urllib.parse.urljoin(self.endpoint.base + path, location)

    # --- blobs ------------------------------------------------------------------------------

    def _blob_chunks(self, repository: str, digest: str) -> Iterator[bytes]:
        target = f"/v2/{repository}/blobs/{digest}"
        for _ in range(5):  # a registry may redirect blob reads to its storage backend
            with self._exchange("GET", target, scope=_scope(repository)) as response:
                if response.status in REDIRECTS:
                    target = urllib.parse.urljoin(self.endpoint.base + target, response.getheader("Location", ""))
                    response.read()
                    continue
                self._expect(response, (200,), f"GET blob {self._ref(repository, digest)}")
                while chunk := response.read(CHUNK):
                    yield chunk
                return
        raise ServiceError(f"registry {self.host} redirected GET blob {digest} more than 5 times")

    def _check_blob(self, repository: str, digest: str, actual: str) -> None:
        if actual != digest:
            raise IntegrityError(
                f"blob {self._ref(repository, digest)} does not match its digest: expected {digest}, "
                f"the bytes received hash to {actual}",
                hint="the registry's storage or something between us and it altered the blob; do not use it",
            )

    # --- transport and authentication ---------------------------------------------------------

    def _resolve(self) -> Endpoint:
        """Decide the scheme once: https unless told otherwise; http for loopback when https cannot connect."""
        if self._endpoint is not None:
            return self._endpoint
        if self._plain_http:
            self._endpoint = Endpoint(self.host, "http")
            return self._endpoint
        https = https_endpoint(self.host, self._ca_cert)
        if problem := ca_problem(https):
            raise ConfigError(f"cannot use https for {self.host}: {problem}", hint=f"check --ca-cert / ${CA_ENV}")
        try:
            self._probe(https)
            self._endpoint = https
        except OSError as exc:
            if not (is_loopback(self.host) and fallback_allowed(exc)):
                raise self._unreachable(https, exc) from None
            self._endpoint = self._plain_loopback(https, exc)
        return self._endpoint

    def _plain_loopback(self, https: Endpoint, https_error: OSError) -> Endpoint:
        plain = Endpoint(self.host, "http")
        try:
            self._probe(plain)
        except OSError as exc:
            raise ServiceError(
                f"registry {self.host} cannot be reached over https ({https.describe()}: {https_error}) "
                f"nor over plain HTTP ({exc})",
                hint="start it (verlenv services up --registry), or check the host and port",
            ) from None
        return plain

    def _probe(self, endpoint: Endpoint) -> None:
        """Any HTTP answer to GET /v2/ (401 included) proves the scheme is right."""
        connection = endpoint.connection(timeout=self.timeout)
        try:
            connection.request("GET", "/v2/")
            connection.getresponse().read()
        finally:
            connection.close()

    def _unreachable(self, endpoint: Endpoint, exc: OSError) -> ServiceError:
        import ssl

        if isinstance(exc, ssl.SSLCertVerificationError):
            return ServiceError(
                f"registry {endpoint.describe()}: its certificate is not trusted ({exc.verify_message})",
                hint=f"pass --ca-cert PATH, set ${CA_ENV}, or put the CA in /etc/docker/certs.d/{self.host}/ca.crt",
            )
        return ServiceError(
            f"registry {endpoint.describe()} cannot be reached: {exc}",
            hint="check the host and port, and that the registry runs; plain HTTP needs http://HOST explicitly",
        )

    @contextmanager
    def _exchange(
        self, method: str, target: str, *, scope: str, headers: dict[str, str] | None = None, body: Body = None
    ) -> Iterator[http.client.HTTPResponse]:
        """One authenticated request; the open response (status not yet checked), closed afterwards."""
        connection, response = self._authorized(method, target, scope, headers or {}, body)
        try:
            yield response
        finally:
            connection.close()

    def _authorized(
        self, method: str, target: str, scope: str, headers: dict[str, str], body: Body
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        for attempt in range(2):
            connection, response = self._send(method, target, {**headers, **self._authorization(scope)}, body)
            if response.status != 401:
                return connection, response
            challenge = parse_challenge(response.getheader("WWW-Authenticate", ""))
            response.read()
            connection.close()
            if attempt == 0:
                self._answer(challenge, scope)
        raise self._refused()

    def _send(
        self, method: str, target: str, headers: dict[str, str], body: Body
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        endpoint = self._resolve()
        parts = urllib.parse.urlsplit(target)
        host, scheme = parts.netloc or endpoint.host, parts.scheme or endpoint.scheme
        path = urllib.parse.urlunsplit(("", "", parts.path, parts.query, ""))
        if host != endpoint.host:  # a redirect to storage: our credentials are not theirs
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        connection = endpoint.connection(host, scheme, self.timeout)
        try:
            if isinstance(body, Path):
                with body.open("rb") as handle:
                    length = {"Content-Length": str(body.stat().st_size)}
                    connection.request(method, path, body=handle, headers={**headers, **length})
                    return connection, connection.getresponse()
            connection.request(method, path, body=body, headers=headers)
            return connection, connection.getresponse()
        except OSError as exc:
            connection.close()
            raise ServiceError(
                f"{method} {scheme}://{host}{parts.path} failed: {exc} (over {endpoint.describe()})",
                hint="re-run once the registry answers; nothing is tagged before every blob arrived",
            ) from None

    def _authorization(self, scope: str) -> dict[str, str]:
        credentials = self._credentials
        if self._basic and credentials is not None:
            return {"Authorization": credentials.basic_header()}
        token = self._tokens.get(scope)
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _answer(self, challenge: Challenge, scope: str) -> None:
        if challenge.scheme == "basic":
            if self._lookup_credentials() is None:
                raise self._needs_credentials()
            self._basic = True
        elif challenge.scheme == "bearer":
            self._tokens[scope] = self._token(challenge)
        else:
            raise ServiceError(
                f"registry {self.host} asks for '{challenge.scheme}' authentication, which verlenv lacks"
            )

    def _token(self, challenge: Challenge) -> str:
        """GET the realm with service and scopes (Basic credentials if we have them); its token."""
        realm = urllib.parse.urlsplit(challenge.realm)
        if realm.scheme not in ("http", "https") or not realm.netloc:
            raise ServiceError(f"registry {self.host} named an unusable token realm {challenge.realm!r}")
        credentials = self._lookup_credentials()
        if realm.scheme == "http" and credentials and not (is_loopback(realm.netloc) or self._plain_http):
            raise ServiceError(
                f"registry {self.host} sends credentials to a plain-HTTP token service {challenge.realm}; refused",
                hint="use an https realm (or http://HOST to accept plain HTTP on purpose)",
            )
        params = [("service", challenge.service)] if challenge.service else []
        params += [("scope", scope) for scope in challenge.scopes]
        query = "&".join(filter(None, (realm.query, urllib.parse.urlencode(params))))
        headers = {"Authorization": credentials.basic_header()} if credentials else {}
        connection = self.endpoint.connection(realm.netloc, realm.scheme, self.timeout)
        try:
            connection.request("GET", f"{realm.path or '/'}?{query}", headers=headers)
            response = connection.getresponse()
            status, data = response.status, response.read()
        except OSError as exc:
            raise ServiceError(f"token service {challenge.realm} for {self.host} cannot be reached: {exc}") from None
        finally:
            connection.close()
        return _token_of(status, data, challenge.realm, self._refused if credentials else self._needs_credentials)

    def _lookup_credentials(self) -> Credentials | None:
        if not self._credentials_looked_up:
            self._credentials = find_credentials(self.host)
            self._credentials_looked_up = True
        return self._credentials

    def _refused(self) -> ServiceError:
        credentials = self._credentials
        if credentials is None:
            return self._needs_credentials()
        return ServiceError(
            f"registry {self.host} refused the credentials of user '{credentials.username}' "
            f"(from {credentials.source})",
            hint=f"fix the password in {credentials.source}, or run `docker login {self.host}`, or set "
            f"{USERNAME_ENV} and {PASSWORD_ENV}; if the user is right, it may lack access to this repository",
        )

    def _needs_credentials(self) -> ServiceError:
        return ServiceError(
            f"registry {self.host} wants credentials and none were found (looked at {USERNAME_ENV}/"
            f"{PASSWORD_ENV} and {docker_config_path()})",
            hint=f"run `docker login {self.host}`, or set {USERNAME_ENV} and {PASSWORD_ENV}",
        )

    def _expect(self, response: http.client.HTTPResponse, statuses: tuple[int, ...], what: str) -> None:
        if response.status in statuses:
            return
        detail = _error_detail(response.read())
        raise ServiceError(f"{what} on {self.endpoint.describe()} answered {response.status} {response.reason}{detail}")

    def _ref(self, repository: str, reference: str) -> str:
        separator = "@" if is_digest(reference) else ":"
        return f"{self.host}/{repository}{separator}{reference}"


def _scope(repository: str, push: bool = False) -> str:
    return f"repository:{repository}:{'pull,push' if push else 'pull'}"


def _token_of(status: int, data: bytes, realm: str, refused: Any) -> str:
    if status in (401, 403):
        raise refused()
    if status != 200:
        raise ServiceError(f"token service {realm} answered {status}{_error_detail(data)}")
    try:
        answer = json.loads(data)
        token = answer.get("token") or answer.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not token:
        raise ServiceError(f"token service {realm} answered without a token")
    return str(token)


def _error_detail(data: bytes) -> str:
    """Distribution's {"errors": [{"code", "message"}]} as ': CODE message; ...' (or the start of the text)."""
    try:
        errors = json.loads(data).get("errors") or []
        text = "; ".join(f"{e.get('code', '')} {e.get('message', '')}".strip() for e in errors)
    except (ValueError, AttributeError):
        text = data[:200].decode(errors="replace").strip()
    return f": {text}" if text else ""
