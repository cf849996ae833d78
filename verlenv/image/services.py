"""Dev and build-host services: Docker engine, a loopback registry, mmdebstrap, bubblewrap.

Everything here works on a fresh Debian machine as root: missing programs are installed with
apt, the engine is started with no default bridge and no iptables rules (builds and runs use
``network_mode="none"`` or the host network), and registries listen on 127.0.0.1 only.
Each function is idempotent: it reuses what is already running.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from verlenv.errors import ServiceError
from verlenv.loopback import free_port

APT_PACKAGES = {
    "dockerd": "docker.io",
    "docker-registry": "docker-registry",
    "mmdebstrap": "mmdebstrap",  # the Debian base, reproducibly (SOURCE_DATE_EPOCH)
    "bwrap": "bubblewrap",  # running an image's tree with no engine (accept-image --rootfs)
}
DOCKERD_ARGS = ("--bridge=none", "--iptables=false")
STATE_DIR = Path(os.environ.get("VERLENV_STATE_DIR", "/var/lib/verlenv"))
DOCKERD_LOG = STATE_DIR / "dockerd.log"
DOCKER_SOCKET = "/var/run/docker.sock"
API_VERSION = "1.41"


def _say(message: str) -> None:
    print(f"[services] {message}", file=sys.stderr, flush=True)


def missing_programs(programs: tuple[str, ...] = tuple(APT_PACKAGES)) -> list[str]:
    return [p for p in programs if not (shutil.which(p) or Path("/usr/sbin", p).exists())]


def ensure_programs(programs: tuple[str, ...] = tuple(APT_PACKAGES)) -> None:
    """apt-get install whatever of dockerd / docker-registry / mmdebstrap / bwrap is missing."""
    missing = missing_programs(programs)
    if not missing:
        return
    packages = sorted({APT_PACKAGES[p] for p in missing})
    if os.geteuid() != 0:
        raise ServiceError(f"missing {', '.join(missing)}", hint=f"as root: apt-get install -y {' '.join(packages)}")
    _say(f"installing {' '.join(packages)} with apt-get (once per machine)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ServiceError(f"`{' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}")
    still = missing_programs(programs)
    if still:
        raise ServiceError(f"apt-get finished but {', '.join(still)} is still missing")


def engine_client():  # type: ignore[no-untyped-def]
    import docker  # host-side dependency (verlenv[build])

    # A fixed API version: "auto" would query the engine inside the constructor and leak the
    # socket when it does not answer yet. 1.41 is Docker 20.10 (Debian 12); newer engines accept it.
    if os.environ.get("DOCKER_HOST"):
        return docker.from_env(timeout=600, version=API_VERSION)
    return docker.DockerClient(base_url=f"unix://{DOCKER_SOCKET}", timeout=600, version=API_VERSION)


def engine_answers() -> bool:
    try:
        client = engine_client()
    except Exception:  # noqa: BLE001 - any failure means "not answering"
        return False
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001
        return False
    finally:
        client.close()


def ensure_engine(timeout_s: float = 120.0):  # type: ignore[no-untyped-def]
    """Return a Docker SDK client for a running engine, starting dockerd if needed."""
    if engine_answers():
        return engine_client()
    if os.environ.get("DOCKER_HOST"):
        raise ServiceError(f"the Docker engine at DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer")
    if os.geteuid() != 0:
        raise ServiceError(
            "no Docker engine answers on " + DOCKER_SOCKET,
            hint="start it as root: verlenv services up (or dockerd --bridge=none --iptables=false)",
        )
    ensure_programs(("dockerd",))
    _start_dockerd()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine_answers():
            _say("Docker engine is up")
            return engine_client()
        time.sleep(0.5)
    raise ServiceError(f"dockerd did not answer within {timeout_s:.0f}s", hint=f"see {DOCKERD_LOG}")


def _start_dockerd() -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    _say(f"starting {dockerd} {' '.join(DOCKERD_ARGS)} (log: {DOCKERD_LOG})")
    with DOCKERD_LOG.open("ab") as log:
        _spawn([dockerd, *DOCKERD_ARGS], log)


def _spawn(cmd: list[str], log: IO[bytes]) -> int:
    """Start a daemon in its own session, stdin from /dev/null, output to ``log``; return its pid.

    posix_spawn rather than Popen: a Popen object for a daemon that outlives us would be reported
    as a leaked, still-running subprocess when the interpreter exits.
    """
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, log.fileno(), 1),
        (os.POSIX_SPAWN_DUP2, log.fileno(), 2),
    ]
    return os.posix_spawn(cmd[0], cmd, dict(os.environ), file_actions=actions, setsid=True)


@dataclass(frozen=True)
class HtpasswdAuth:
    """``auth: htpasswd``: Distribution reads bcrypt entries only (``htpasswd -B``, or the bcrypt package)."""

    path: Path
    realm: str = "verlenv"


@dataclass(frozen=True)
class TokenAuth:
    """``auth: token``: clients fetch a JWT from ``realm``, signed by a key whose cert is in ``rootcertbundle``."""

    realm: str
    service: str
    issuer: str
    rootcertbundle: Path


@dataclass(frozen=True)
class TLSFiles:
    """``http.tls``: the server certificate (with its chain) and its key, PEM."""

    certificate: Path
    key: Path


@dataclass(frozen=True)
class Registry:
    """A Distribution registry on loopback; ``host`` is what goes in image references."""

    port: int
    storage: Path
    pid: int
    scheme: str = "http"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"

    def answers(self) -> bool:
        return registry_answers(self.host, self.scheme)

    def stop(self) -> None:
        try:
            os.kill(self.pid, 15)
        except ProcessLookupError:
            return
        for _ in range(50):
            if not _alive(self.pid):
                return
            time.sleep(0.1)
        os.kill(self.pid, 9)


def _alive(pid: int) -> bool:
    try:  # our own child that exited is a zombie until reaped: reap it, then it is gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child: kill(0) below tells
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def registry_answers(host: str, scheme: str = "http") -> bool:
    """Does a registry answer GET /v2/? 401 counts: a registry with auth answers with a challenge.

    Over https this only asks whether it answers, not who it is, so the certificate is not checked.
    """
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{scheme}://{host}/v2/", timeout=2, context=context) as response:
            return response.status == 200
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except (urllib.error.URLError, OSError):
        return False


def start_registry(
    storage: Path,
    port: int | None = None,
    timeout_s: float = 30.0,
    *,
    auth: HtpasswdAuth | TokenAuth | None = None,
    tls: TLSFiles | None = None,
) -> Registry:
    """Start `docker-registry serve` on 127.0.0.1:PORT with its storage in ``storage``.

    ``auth`` adds htpasswd or token authentication, ``tls`` serves https with that certificate.
    """
    ensure_programs(("docker-registry",))
    port = port or free_port()
    storage.mkdir(parents=True, exist_ok=True)
    config = storage / "config.yml"
    config.write_text(registry_config(storage / "data", port, auth, tls))
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    with (storage / "registry.log").open("ab") as log:
        pid = _spawn([binary, "serve", str(config)], log)
    registry = Registry(port=port, storage=storage, pid=pid, scheme="https" if tls else "http")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if registry.answers():
            return registry
        if not _alive(pid):
            break
        time.sleep(0.2)
    registry.stop()
    raise ServiceError(f"docker-registry did not answer on {registry.url}", hint=f"see {storage / 'registry.log'}")


def registry_config(
    data: Path, port: int, auth: HtpasswdAuth | TokenAuth | None = None, tls: TLSFiles | None = None
) -> str:
    """Distribution's config.yml (YAML written by hand: JSON strings are valid YAML scalars)."""
    text = (
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {data}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    if tls is not None:
        text += f"  tls:\n    certificate: {json.dumps(str(tls.certificate))}\n    key: {json.dumps(str(tls.key))}\n"
    if isinstance(auth, HtpasswdAuth):
        text += f"auth:\n  htpasswd:\n    realm: {json.dumps(auth.realm)}\n    path: {json.dumps(str(auth.path))}\n"
    elif isinstance(auth, TokenAuth):
        fields = {"realm": auth.realm, "service": auth.service, "issuer": auth.issuer}
        text += "auth:\n  token:\n" + "".join(f"    {k}: {json.dumps(v)}\n" for k, v in fields.items())
        text += f"    rootcertbundle: {json.dumps(str(auth.rootcertbundle))}\n"
    return text
