"""verlenv's task runner. Each session parses its posargs and calls one verlenv command.

nox -l                                         list sessions
nox -s lock -- --profile NAME | --all          resolve locks (uv); `-- --check` for the offline check
nox -s verify -- --profile NAME                ABI-verify the locked wheels
nox -s build-image -- --profile NAME           hermetic image build (default profile without args)
nox -s accept -- --profile NAME                acceptance suite inside the built image
nox -s publish -- --profile NAME --registry R  push an accepted image by digest, update the catalog
nox -s release -- --profile NAME --registry R  the whole chain, stopping at the first failure
nox -s tests                                   unit + integration tests (starts dockerd / registry as root)
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]

BUILD = ".[build]"
# The CPU build of torch for the in-process acceptance tests. Installed with pip, whose own
# configuration says where it comes from (a find-links directory, or the PyTorch CPU index).
TORCH_CPU = "torch==2.13.0+cpu"


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks: ruff over the package, tests, benchmarks and this file."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "verlenv", "tests", "benchmarks", "noxfile.py")


@nox.session(venv_backend="virtualenv")
def tests(session: nox.Session) -> None:
    """Unit and integration tests; integration starts the Docker engine and a loopback registry (root)."""
    session.install(TORCH_CPU)
    session.install("-e", ".[build,test,accept]")
    args = session.posargs or ["tests/unit", "tests/integration"]
    session.run("pytest", "-q", "-ra", *args)


@nox.session
def lock(session: nox.Session) -> None:
    """Resolve profile locks with uv (`-- --profile NAME`, `-- --all`, `-- --check`)."""
    session.install("-e", BUILD)
    session.run("verlenv", "lock", *session.posargs)


@nox.session
def verify(session: nox.Session) -> None:
    """ABI-verify a profile's locked wheels (`-- --profile NAME`; `-- --check-committed` to compare reports)."""
    session.install("-e", BUILD)
    session.run("verlenv", "verify", *session.posargs)


@nox.session(name="build-image")
def build_image(session: nox.Session) -> None:
    """Build a profile's image with no network (`-- --profile NAME`; default profile without args)."""
    session.install("-e", BUILD)
    session.run("verlenv", "services", "up")
    session.run("verlenv", "build", *session.posargs)


@nox.session
def accept(session: nox.Session) -> None:
    """Run the acceptance suite inside a profile's built image (`-- --profile NAME`)."""
    session.install("-e", BUILD)
    session.run("verlenv", "accept-image", *session.posargs)


@nox.session
def publish(session: nox.Session) -> None:
    """Push an accepted image by digest and record it in images/catalog.json (`-- --profile NAME --registry R`)."""
    session.install("-e", BUILD)
    session.run("verlenv", "publish", *session.posargs)


@nox.session
def release(session: nox.Session) -> None:
    """lock check -> verify -> build -> accept -> publish (`-- --profile NAME --registry HOST[:PORT]/REPO`)."""
    session.install("-e", BUILD)
    session.run("verlenv", "services", "up")
    session.run("verlenv", "release", *session.posargs)


@nox.session
def services(session: nox.Session) -> None:
    """Install and start dockerd, debootstrap and (with `-- --registry`) a loopback registry."""
    session.install("-e", BUILD)
    session.run("verlenv", "services", "up", *session.posargs)
