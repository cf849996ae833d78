"""An in-memory registry speaking just enough of the Distribution API to test a client's edge cases.

It can do what the real registry never does here: answer with a relative upload Location, redirect
blob reads, serve bytes that do not match their digest, report a wrong digest after a PUT, and ask
for Basic authentication.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FakeState:
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, bytes] = field(default_factory=dict)  # by digest and by tag
    corrupt: dict[str, bytes] = field(default_factory=dict)  # digest -> bytes served instead
    lie_on_put: str = ""  # a Docker-Content-Digest to answer a manifest PUT with
    basic: tuple[str, str] | None = None  # required user/password
    reject_uploads: set[str] = field(default_factory=set)  # digests whose upload fails with 500
    requests: list[str] = field(default_factory=list)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _handler(state: FakeState) -> type[BaseHTTPRequestHandler]:
    class Fake(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def _route(self) -> None:
            state.requests.append(f"{self.command} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not self._authorized():
                return self._send(401, headers={"WWW-Authenticate": 'Basic realm="fake"'})
            url = urllib.parse.urlsplit(self.path)
            parts, query = url.path.split("/"), urllib.parse.parse_qs(url.query)
            if url.path == "/v2/":
                return self._send(200, b"{}")
            if url.path.startswith("/redirected/"):
                return self._blob(parts[-1])
            kind, reference = parts[-2], parts[-1]
            if kind == "manifests":
                return self._manifest(reference, body)
            if kind == "blobs" and self.command == "HEAD":
                return self._send(200 if reference in state.blobs else 404)
            if kind == "blobs":
                return self._send(307, headers={"Location": f"/redirected/{reference}"})
            if kind == "uploads" and self.command == "POST":
                return self._send(202, headers={"Location": "../uploads/upload-1?_state=opaque"})
            if self.command == "PUT" and "upload-1" in url.path:
                digest = query["digest"][0]
                assert query["_state"] == ["opaque"], query
                if digest in state.reject_uploads:
                    return self._send(500, b'{"errors":[{"code":"UNKNOWN","message":"disk full"}]}')
                state.blobs[digest] = body
                return self._send(201, headers={"Docker-Content-Digest": _digest(body)})
            return self._send(404)

        def _authorized(self) -> bool:
            if state.basic is None:
                return True
            expected = "Basic " + base64.b64encode(":".join(state.basic).encode()).decode()
            return self.headers.get("Authorization") == expected

        def _manifest(self, reference: str, body: bytes) -> None:
            if self.command == "PUT":
                state.manifests[reference] = state.manifests[_digest(body)] = body
                return self._send(201, headers={"Docker-Content-Digest": state.lie_on_put or _digest(body)})
            data = state.manifests.get(reference)
            if data is None:
                return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')
            digest = _digest(data)
            return self._send(200, state.corrupt.get(digest, data), {"Docker-Content-Digest": digest})

        def _blob(self, digest: str) -> None:
            data = state.blobs.get(digest)
            if data is None:
                return self._send(404)
            return self._send(200, state.corrupt.get(digest, data))

        def _send(self, status: int, data: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = _route

    return Fake


@contextmanager
def fake_registry(state: FakeState) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of the fake, serving ``state`` until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
