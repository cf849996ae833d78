"""Registry credentials and challenges: where a user's password comes from, and what a 401 asks for.

Credentials are looked up the way `docker login` left them, so a cluster user who can `docker pull`
needs nothing new: first ``VERLENV_REGISTRY_USERNAME`` + ``VERLENV_REGISTRY_PASSWORD``, then Docker's
``config.json`` (``credHelpers[host]``, else ``credsStore``, else ``auths[host].auth``). A Credentials
value knows where it came from, so an error can say which source to fix; its repr never shows the secret.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.errors import ConfigError

USERNAME_ENV = "VERLENV_REGISTRY_USERNAME"
PASSWORD_ENV = "VERLENV_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # "env VERLENV_REGISTRY_USERNAME", "/root/.docker/config.json", "docker-credential-pass"

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


@dataclass(frozen=True)
class Challenge:
    """One WWW-Authenticate challenge: ``Basic realm=...`` or ``Bearer realm=...,service=...,scope=...``."""

    scheme: str  # lower case: "basic" or "bearer"
    params: dict[str, str]

    @property
    def realm(self) -> str:
        return self.params.get("realm", "")

    @property
    def service(self) -> str:
        return self.params.get("service", "")

    @property
    def scopes(self) -> tuple[str, ...]:
        # Distribution joins several scopes with spaces in one parameter (a cross-repository mount).
        return tuple(self.params.get("scope", "").split())


_PARAM = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def parse_challenge(header: str) -> Challenge:
    """``Bearer realm="https://a/token",service="reg",scope="repository:x:pull"`` -> Challenge."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        quoted, bare = match.group(2), match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
    return Challenge(scheme.lower(), params)


def docker_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("DOCKER_CONFIG")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return Path(base) / "config.json" if base else home / ".docker" / "config.json"


def find_credentials(host: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """The first credentials found for ``host`` (HOST[:PORT]), or None: then we go anonymous."""
    env = os.environ if env is None else env
    if env.get(USERNAME_ENV) and env.get(PASSWORD_ENV) is not None:
        return Credentials(env[USERNAME_ENV], env[PASSWORD_ENV], f"env {USERNAME_ENV}/{PASSWORD_ENV}")
    path = docker_config_path(env)
    config = _read_config(path)
    helper = _matching(config.get("credHelpers") or {}, host) or config.get("credsStore") or ""
    if helper:
        found = helper_credentials(helper, host, env)
        if found is not None:
            return found
    entry = _matching(config.get("auths") or {}, host)
    if isinstance(entry, dict) and entry.get("auth"):
        return _decode_auth(str(entry["auth"]), path)
    return None


def _read_config(path: Path) -> dict:  # type: ignore[type-arg]
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not readable Docker config ({exc})", hint="fix or move it; it holds logins"
        ) from None
    return data if isinstance(data, dict) else {}


def normalize_host(key: str) -> str:
    """Docker's ConvertToHostname: drop the scheme and any path (``/v1/``, ``/v2/``)."""
    for prefix in ("https://", "http://"):
        key = key.removeprefix(prefix)
    return key.split("/", 1)[0]


def _matching(table: Mapping[str, object], host: str) -> object:
    """The value whose key names ``host`` the way docker writes keys (exact key first)."""
    if host in table:
        return table[host]
    for key, value in table.items():
        if normalize_host(key) == host:
            return value
    return None


def _decode_auth(auth: str, path: Path) -> Credentials:
    try:
        username, _, password = base64.b64decode(auth).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(
            f"{path}: an auths entry is not base64 of user:password", hint="run docker login again"
        ) from None
    return Credentials(username, password, str(path))


def helper_credentials(helper: str, host: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """Ask ``docker-credential-<helper> get`` (server URL on stdin); None when it has nothing for host."""
    program = f"docker-credential-{helper}"
    env = dict(os.environ if env is None else env)
    executable = shutil.which(program, path=env.get("PATH"))
    if executable is None:
        raise ConfigError(
            f"{docker_config_path(env)} names the credential helper '{helper}', but {program} is not on PATH",
            hint=f"install {program}, or remove it from config.json, or set {USERNAME_ENV}/{PASSWORD_ENV}",
        )
    proc = subprocess.run(
        [executable, "get"], input=host, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    if proc.returncode != 0:
        # "credentials not found in native keychain" is how every helper says "nothing stored"
        return None
    try:
        data = json.loads(proc.stdout)
        username, secret = str(data["Username"]), str(data["Secret"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{program} get answered something that is not Username/Secret JSON") from None
    if username == "<token>":  # an identity token is for Docker's own OAuth flow, not Basic auth
        return None
    return Credentials(username, secret, program)
