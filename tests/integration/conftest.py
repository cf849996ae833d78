"""Real services for the integration tier: the fixtures start them, nothing is assumed running.

These tests need root on a machine without a running engine (CI runs them as root); they fail,
never skip, when the engine cannot be had, so a green run always means they ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from verlenv import services


@pytest.fixture(scope="session")
def engine():  # type: ignore[no-untyped-def]
    """A Docker SDK client for a running engine (started with --bridge=none --iptables=false if needed).

    Also installs the other programs the integration tier uses (docker-registry, debootstrap).
    """
    services.ensure_programs()
    client = services.ensure_engine()
    yield client
    client.close()


@pytest.fixture
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.Registry]:
    """A fresh Distribution registry on 127.0.0.1:<free port>, storage in a temp dir."""
    reg = services.start_registry(Path(tmp_path_factory.mktemp("registry")))
    yield reg
    reg.stop()
