"""Bit-for-bit: two cold builds of cpu-smoke, as unlike as one machine allows, give one image.

The second build runs against a second Docker engine with its own (empty) data root, from another
checkout path, with its own verlenv cache (every wheel and .deb fetched again, the base layer made
again by mmdebstrap), another time zone and a stricter umask. Both must give the image ID, DiffIDs
and per-file manifest that lockfiles/cpu-smoke.image.json records, and, pushed to two fresh
registries, the same manifest digest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.variants import copy_project
from verlenv.image import expected, services
from verlenv.image.build import BuildOptions, BuildResult, build_image, record_path
from verlenv.image.stored import stored_image
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ROOT_ENV, ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.release import ocipush
from verlenv.release.regclient import RegistryClient
from verlenv.wheels.cache import Cache
from verlenv.wheels.wheelhouse import fill


@contextmanager
def second_engine(where: Path) -> Iterator[str]:
    """A second dockerd with its own data root, exec root and socket (no bridge, no iptables)."""
    where.mkdir(parents=True, exist_ok=True)
    # Sockets live under the exec root: a pytest tmp path put containerd's at 107 characters, the
    # limit of a unix socket path, and containerd never came up. A short folder of its own instead.
    short = Path(tempfile.mkdtemp(prefix="verlenv-engine-", dir="/tmp"))
    socket = short / "docker.sock"
    log = (where / "dockerd.log").open("wb")
    proc = subprocess.Popen(
        [
            shutil.which("dockerd") or "/usr/sbin/dockerd",
            "--data-root", str(where / "data"),
            "--exec-root", str(short / "exec"),
            "--pidfile", str(where / "dockerd.pid"),
            "-H", f"unix://{socket}",
            "--bridge=none", "--iptables=false", "--ip6tables=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    host = f"unix://{socket}"
    try:
        deadline = time.monotonic() + 60
        old = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = host
        while not services.engine_answers():
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"the second dockerd did not start: {(where / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield host
    finally:
        if old is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = old
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(short, ignore_errors=True)
        shutil.rmtree(where / "data", ignore_errors=True)  # an image's worth of layers nobody reads again


def _cold_build(paths: ProjectPaths, cache: Cache) -> BuildResult:
    fill(load_profile(paths, "cpu-smoke"), read_lock(paths.lock("cpu-smoke")), cache, quiet=True)
    return build_image(paths, "cpu-smoke", cache, BuildOptions(quiet=True, record=False))


def _push(cache: Cache, image_id: str, registry: services.Registry) -> str:
    image = stored_image(cache, image_id)
    client = RegistryClient(registry.host)
    return ocipush.push_image(
        client, "verlenv", "cpu-smoke", image.config, image.layer_paths, cache.root / "blobs"
    ).digest


def test_two_cold_builds_on_two_engines_give_one_image_and_one_manifest_digest(  # type: ignore[no-untyped-def]
    engine, project_copy: ProjectPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed = expected.read(record_path(project_copy, "cpu-smoke"))
    assert committed is not None, "lockfiles/cpu-smoke.image.json is not committed"

    first_paths = copy_project(project_copy, tmp_path / "checkout-a" / "verlenv")
    monkeypatch.setenv(ROOT_ENV, str(first_paths.root))
    monkeypatch.setenv("TZ", "UTC")
    first_cache = Cache(tmp_path / "cache-a")
    first = _cold_build(first_paths, first_cache)

    old_umask = os.umask(0o077)
    try:
        second_paths = copy_project(project_copy, tmp_path / "somewhere" / "else" / "checkout-b")
        monkeypatch.setenv(ROOT_ENV, str(second_paths.root))
        monkeypatch.setenv("TZ", "Pacific/Kiritimati")
        second_cache = Cache(tmp_path / "cache-b")
        with second_engine(tmp_path / "engine-b"):
            second = _cold_build(second_paths, second_cache)
    finally:
        os.umask(old_umask)

    assert second.diff_ids == first.diff_ids
    assert second.files_sha256 == first.files_sha256
    assert second.image_id == first.image_id
    # ...and it is the image the repository says a fresh build gives
    assert first.image_id == committed.image_id, "lockfiles/cpu-smoke.image.json is stale: rebuild and commit it"
    assert list(first.diff_ids) == [layer.diff_id for layer in committed.layers]

    registries = [services.start_registry(tmp_path / f"registry-{n}") for n in ("a", "b")]
    try:
        digests = {
            _push(first_cache, first.image_id, registries[0]),
            _push(second_cache, second.image_id, registries[1]),
        }
    finally:
        for registry in registries:
            registry.stop()
    assert len(digests) == 1, digests
