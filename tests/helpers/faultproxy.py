"""A reverse proxy on loopback in front of a real registry, that can lie about one manifest digest."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAKE_DIGEST = "sha256:" + "0" * 64


def _handler(upstream: str, lie_for: str) -> type[BaseHTTPRequestHandler]:
    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def _forward(self) -> None:
            body = self._body()
            conn = http.client.HTTPConnection(upstream, timeout=120)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "transfer-encoding")}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() in ("transfer-encoding", "connection", "content-length"):
                    continue
                if key.lower() == "docker-content-digest" and self.command == "HEAD" and lie_for in self.path:
                    value = FAKE_DIGEST
                self.send_header(key, value)
            self.send_header(
                "Content-Length",
                str(len(data)) if self.command != "HEAD" else response.getheader("Content-Length", "0"),
            )
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            conn.close()

        def _body(self) -> bytes | None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while size := int(self.rfile.readline().strip() or b"0", 16):
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(parts)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else None

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

    return Proxy


@contextmanager
def lying_proxy(upstream: str, lie_for: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, lie_for))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
