"""verlenv's task runner. Each session parses its posargs and calls one verlenv command.

nox -l                                   list sessions
nox -s lock -- --profile NAME | --all    resolve locks (uv); `-- --check` for the offline check
nox -s tests                             unit + integration tests (starts dockerd / registry as root)
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]

BUILD = ".[build]"
TEST = ".[build,test]"


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks: ruff over the package, tests, benchmarks and this file."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "verlenv", "tests", "benchmarks", "noxfile.py")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests; integration starts the Docker engine and a loopback registry (root)."""
    session.install("-e", TEST)
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


@nox.session
def services(session: nox.Session) -> None:
    """Install and start dockerd, debootstrap and (with `-- --registry`) a loopback registry."""
    session.install("-e", BUILD)
    session.run("verlenv", "services", "up", *session.posargs)
