"""A PEP 503 package index on 127.0.0.1 serving the wheels and sdists of a directory, with HTTP Range support."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename


class _Handler(BaseHTTPRequestHandler):
    root: Path
    served_ranges: list[str]
    fake_hashes: dict[str, str]

    def log_message(self, *args: object) -> None:  # keep test output clean
        return

    def do_GET(self) -> None:
        parts = [p for p in self.path.split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            return self._project(parts[1])
        if len(parts) == 2 and parts[0] == "files":
            return self._file(self.root / parts[1])
        self.send_error(404)

    def _project(self, name: str) -> None:
        links = []
        for wheel in sorted([*self.root.glob("*.whl"), *self.root.glob("*.tar.gz")]):
            parse = parse_sdist_filename if wheel.name.endswith(".tar.gz") else parse_wheel_filename
            if canonicalize_name(parse(wheel.name)[0]) == canonicalize_name(name):
                digest = self.fake_hashes.get(wheel.name) or hashlib.sha256(wheel.read_bytes()).hexdigest()
                links.append(f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
        if not links:
            return self.send_error(404)
        body = ("<html><body>" + "".join(links) + "</body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _file(self, path: Path) -> None:
        if not path.is_file():
            return self.send_error(404)
        data = path.read_bytes()
        start = 0
        header = self.headers.get("Range")
        if header and header.startswith("bytes="):
            start = int(header[6:].split("-")[0])
            self.served_ranges.append(header)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


@contextmanager
def serve(root: Path, fake_hashes: dict[str, str] | None = None) -> Iterator[tuple[str, list[str]]]:
    """Yield (index URL, list of Range headers served) for an index over ``root``'s wheels."""
    ranges: list[str] = []
    handler = type("Handler", (_Handler,), {"root": root, "served_ranges": ranges, "fake_hashes": fake_hashes or {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", ranges
    finally:
        server.shutdown()
        server.server_close()
