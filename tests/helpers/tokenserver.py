"""A tiny Docker token service on 127.0.0.1 for Distribution's `auth: token`.

It checks Basic credentials against a dict, then issues a JWT (RS256, the signer's certificate in
the ``x5c`` header, which Distribution verifies against its ``rootcertbundle``) granting the
scopes asked for. It counts what it was asked, so tests can see tokens being cached per scope.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.helpers.pki import Signer

SERVICE, ISSUER = "verlenv-test-registry", "verlenv-test-issuer"


@dataclass
class TokenLog:
    requests: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (user or "", scopes)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(signer: Signer, subject: str, scopes: tuple[str, ...], service: str = SERVICE) -> str:
    header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(signer.der()).decode()]}
    now = int(time.time())
    access = []
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        access.append({"type": kind, "name": name, "actions": actions.split(",")})
    claims = {"iss": ISSUER, "sub": subject, "aud": service, "exp": now + 300, "nbf": now - 10, "iat": now}
    claims |= {"jti": f"{now}-{len(scopes)}-{subject}", "access": access}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(signer.sign(signing_input.encode()))}"


def _handler(signer: Signer, users: dict[str, str], log: TokenLog) -> type[BaseHTTPRequestHandler]:
    class Token(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            scopes = tuple(s for value in query.get("scope", []) for s in value.split())
            user = self._user()
            log.requests.append((user or "", scopes))
            if user is None:
                self._answer(401, {"details": "wrong or missing credentials"})
            else:
                self._answer(200, {"token": make_jwt(signer, user, scopes), "expires_in": 300})

        def _user(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Basic "):
                return None
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            return user if users.get(user) == password else None

        def _answer(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Token


@contextmanager
def token_server(signer: Signer, users: dict[str, str]) -> Iterator[tuple[str, TokenLog]]:
    """(realm URL, log) of a token service running until the block ends."""
    log = TokenLog()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(signer, users, log))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token", log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
