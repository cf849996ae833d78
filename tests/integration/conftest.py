"""Real services for the integration tier: the fixtures start them, nothing is assumed running.

These tests need root on a machine without a running engine (CI runs them as root); they fail,
never skip, when the engine cannot be had, so a green run always means they ran.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.engine import scratch_registry
from tests.helpers.variants import copy_project
from verlenv.image import services
from verlenv.image.build import BuildOptions, BuildResult, build_image
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ROOT_ENV, ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache, default_root
from verlenv.wheels.wheelhouse import fill

REPO = Path(__file__).resolve().parents[2]


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
def registry(engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.Registry]:  # type: ignore[no-untyped-def]
    """A fresh Distribution registry on 127.0.0.1:<free port>, storage in a temp dir."""
    with scratch_registry(engine, Path(tmp_path_factory.mktemp("registry"))) as reg:
        yield reg


@pytest.fixture(scope="session")
def project_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectPaths]:
    """The project (package, images, locks) copied to a temp dir, so builds never touch the checkout."""
    root = copy_project(ProjectPaths(REPO), Path(tmp_path_factory.mktemp("project"))).root
    old = os.environ.get(ROOT_ENV)
    os.environ[ROOT_ENV] = str(root)
    yield ProjectPaths(root)
    if old is None:
        os.environ.pop(ROOT_ENV, None)
    else:
        os.environ[ROOT_ENV] = old


@pytest.fixture(scope="session")
def cache() -> Cache:
    """The machine's wheel cache: downloads are shared with earlier runs (content-addressed, verified)."""
    return Cache(default_root())


@pytest.fixture(scope="session")
def cpu_smoke_files(project_copy: ProjectPaths, cache: Cache) -> Cache:
    """The cache holding every file of cpu-smoke's committed lock, fetched from the real index. A test
    that points the index at a local one of its own needs them there first."""
    profile = load_profile(project_copy, "cpu-smoke")
    fill(profile, read_lock(project_copy.lock("cpu-smoke")), cache, quiet=True)
    return cache


@pytest.fixture(scope="session")
def cpu_smoke(engine, project_copy: ProjectPaths, cpu_smoke_files: Cache) -> BuildResult:  # type: ignore[no-untyped-def]
    """The cpu-smoke image, built for real from the committed lock and verify report."""
    return build_image(project_copy, "cpu-smoke", cpu_smoke_files, BuildOptions(quiet=True))


def run_in(engine, image: str, command: str, stderr: bool = True, **kwargs) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """Run ``command`` in a throwaway container without network; (exit code, output).

    ``stderr=False`` keeps only stdout, for output a test parses: a warning that a library prints
    to stderr would otherwise land inside the JSON, at a place that varies from run to run."""
    container = engine.containers.run(image, ["bash", "-c", command], detach=True, network_mode="none", **kwargs)
    try:
        status = container.wait(timeout=600)
        return int(status["StatusCode"]), container.logs(stdout=True, stderr=stderr).decode(errors="replace")
    finally:
        container.remove(force=True)


@pytest.fixture(scope="session")
def accepted(engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache):  # type: ignore[no-untyped-def]
    """The cpu-smoke image with a passing acceptance report stored by its image ID."""
    from verlenv.accept.image import accept_image

    report, _ = accept_image(
        project_copy,
        "cpu-smoke",
        cache,
        image=cpu_smoke.image_id,
        gpus="none",
        args=("--steps", "15", "--no-distributed"),
    )
    assert report["passed"], report["verdicts"]
    return cpu_smoke
