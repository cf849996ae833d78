"""Publish and pull against a real Distribution registry on loopback, faults included. Publish pushes
the blobs verlenv wrote over HTTP (no engine); the engine is used only to check what a docker pull gets."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.engine import scratch_registry
from tests.helpers.faultproxy import FAKE_DIGEST, lying_proxy
from verlenv.cli import main
from verlenv.errors import CheckFailed, ConfigError, IntegrityError, ServiceError
from verlenv.image import services
from verlenv.paths import ProjectPaths
from verlenv.release.publish import publish
from verlenv.release.pull import pull
from verlenv.wheels.cache import Cache


@pytest.fixture(scope="module")
def shared_registry(engine, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One registry for the tests that need layers already pushed (a full push costs minutes)."""
    with scratch_registry(engine, Path(tmp_path_factory.mktemp("shared-registry"))) as reg:
        yield reg


def _private(cache: Cache, where: Path) -> Cache:
    """A cache holding the built image (files, layers, image configs hard-linked) but no acceptance reports."""
    import os

    own = Cache(where)
    for folder in ("files", "layers", "images"):
        shutil.copytree(cache.root / folder, own.root / folder, copy_function=os.link)
    return own


def _repositories(registry: services.Registry) -> list[str]:
    with urllib.request.urlopen(f"http://{registry.host}/v2/_catalog", timeout=10) as response:
        return json.loads(response.read())["repositories"]


def test_an_image_that_was_not_accepted_is_refused_and_nothing_is_pushed(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache, registry: services.Registry, tmp_path: Path
) -> None:
    target = tmp_path / "catalog.json"
    with pytest.raises(CheckFailed, match="no acceptance report"):
        publish(project_copy, "cpu-smoke", _private(cache, tmp_path / "c"), f"{registry.host}/verlenv", target)
    assert _repositories(registry) == [] and not target.exists()


def test_an_image_this_cache_did_not_build_is_refused(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, registry: services.Registry, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="was not built with this cache"):
        publish(project_copy, "cpu-smoke", Cache(tmp_path / "empty"), f"{registry.host}/verlenv", tmp_path / "c.json")
    assert _repositories(registry) == []


def test_a_report_for_another_image_is_refused(  # type: ignore[no-untyped-def]
    engine, accepted, project_copy: ProjectPaths, cache: Cache, registry: services.Registry, tmp_path: Path
) -> None:
    private = _private(cache, tmp_path / "cache")
    report = json.loads(cache.acceptance_report(accepted.image_id).read_text())
    report["image_id"] = "sha256:" + "1" * 64
    private.acceptance_report(accepted.image_id).parent.mkdir(parents=True)
    private.acceptance_report(accepted.image_id).write_text(json.dumps(report))
    with pytest.raises(CheckFailed, match="the acceptance report is for image sha256:111"):
        publish(project_copy, "cpu-smoke", private, f"{registry.host}/verlenv", tmp_path / "catalog.json")
    assert _repositories(registry) == []


def test_a_report_from_another_tree_is_refused(  # type: ignore[no-untyped-def]
    engine, accepted, project_copy: ProjectPaths, cache: Cache, registry: services.Registry, tmp_path: Path
) -> None:
    """Same image ID, but the run's file manifest is not the image's: it did not run in this image."""
    report = json.loads(cache.acceptance_report(accepted.image_id).read_text())
    assert report["files_manifest_sha256"] == accepted.files_sha256  # the engine run is the image's tree
    report["files_manifest_sha256"] = "f" * 64
    elsewhere = tmp_path / "gpu-report.json"
    elsewhere.write_text(json.dumps(report))
    with pytest.raises(CheckFailed, match="ran in a tree with file manifest ffffffffffffffff"):
        publish(
            project_copy, "cpu-smoke", cache, f"{registry.host}/verlenv", tmp_path / "c.json", report_file=elsewhere
        )
    assert _repositories(registry) == []


def test_corrupt_catalog_is_refused_unchanged(  # type: ignore[no-untyped-def]
    engine,
    accepted,
    project_copy: ProjectPaths,
    cache: Cache,
    registry: services.Registry,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "catalog.json"
    target.write_text('{"schema_version": 1, "images": {')
    code = main(
        [
            "publish",
            "--profile",
            "cpu-smoke",
            "--registry",
            f"{registry.host}/verlenv",
            "--catalog",
            str(target),
            "--cache",
            str(cache.root),
        ]
    )
    assert code == 2 and "not a valid verlenv catalog" in capsys.readouterr().err
    assert target.read_text() == '{"schema_version": 1, "images": {' and _repositories(registry) == []


def test_registry_down_before_the_push(  # type: ignore[no-untyped-def]
    engine, accepted, project_copy: ProjectPaths, cache: Cache, registry: services.Registry, tmp_path: Path
) -> None:
    target = tmp_path / "catalog.json"
    target.write_text('{"images": {}, "schema_version": 1}\n')
    registry.stop()
    with pytest.raises(ServiceError, match="cannot be reached") as info:
        publish(project_copy, "cpu-smoke", cache, f"{registry.host}/verlenv", target)
    assert info.value.exit_code == 5
    assert target.read_text() == '{"images": {}, "schema_version": 1}\n'


def test_publish_pull_by_digest_and_rerun_without_duplicates(  # type: ignore[no-untyped-def]
    engine,
    accepted,
    project_copy: ProjectPaths,
    cache: Cache,
    registry: services.Registry,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "catalog.json"
    done = publish(project_copy, "cpu-smoke", cache, f"{registry.host}/verlenv", target)
    entry = json.loads(target.read_text())["images"]["cpu-smoke"]
    assert entry["digest"] == done.entry.digest and entry["image_id"] == accepted.image_id
    assert entry["acceptance"]["passed"] is True and entry["components"]["torch"] == "2.13.0+cpu"
    assert entry["labels"]["io.verlenv.files-manifest-sha256"] == accepted.files_sha256
    assert sorted(t.rsplit(":", 1)[1] for t in entry["tags"]) == sorted(
        ["cpu-smoke", f"cpu-smoke-{entry['lock_sha256'][:12]}"]
    )
    # the cluster side, through the engine too: pull by digest, and it is the image that was accepted
    assert main(["pull", "cpu-smoke", "--catalog", str(target), "--engine"]) == 0
    out = capsys.readouterr().out
    hex12 = entry["digest"].removeprefix("sha256:")[:12]
    assert f"apptainer pull cpu-smoke-{hex12}.sif docker://{entry['repository']}@{entry['digest']}" in out
    assert f"enroot import -o cpu-smoke-{hex12}.sqsh 'docker://127.0.0.1:" in out
    pulled = engine.images.get(f"{entry['repository']}@{entry['digest']}")
    assert pulled.labels["io.verlenv.lock-sha256"] == entry["lock_sha256"] and pulled.id == accepted.image_id
    assert pull(entry["tags"][0].rsplit(":", 1)[1], str(target)).entry.digest == entry["digest"]
    # a re-run replaces the entry: same digest, still one entry, nothing sent again
    before = target.read_text()
    again = publish(project_copy, "cpu-smoke", cache, f"{registry.host}/verlenv", target)
    assert target.read_text() == before and list(json.loads(before)["images"]) == ["cpu-smoke"]
    assert again.uploaded == 0


def test_pull_of_a_tag_the_catalog_does_not_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "catalog.json"
    target.write_text('{"images": {}, "schema_version": 1}\n')
    assert main(["pull", "cpu-smokey", "--catalog", str(target)]) == 2
    assert "'cpu-smokey' is not in the catalog" in capsys.readouterr().err


def test_digest_mismatch_on_read_back_leaves_the_catalog_alone(  # type: ignore[no-untyped-def]
    engine, accepted, project_copy: ProjectPaths, cache: Cache, shared_registry: services.Registry, tmp_path: Path
) -> None:
    # Runs after the end-to-end test: the layers are in the registry, only manifests cross the proxy.
    registry = shared_registry
    target = tmp_path / "catalog.json"
    with (
        lying_proxy(registry.host, lie_for="/manifests/cpu-smoke-") as proxy,
        pytest.raises(IntegrityError, match=f"registry reports {FAKE_DIGEST}") as info,
    ):
        publish(project_copy, "cpu-smoke", cache, f"{proxy}/verlenv", target)
    assert info.value.exit_code == 6 and not target.exists()


def test_registry_killed_during_the_push_then_a_rerun_succeeds(  # type: ignore[no-untyped-def]
    engine, accepted, project_copy: ProjectPaths, cache: Cache, registry: services.Registry, tmp_path: Path
) -> None:
    target = tmp_path / "catalog.json"
    uploads = registry.storage / "data"

    def kill_when_uploading() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(uploads.rglob("_uploads")):
            time.sleep(0.05)
        registry.stop()

    killer = threading.Thread(target=kill_when_uploading)
    killer.start()
    with pytest.raises(ServiceError, match=r"failed|cannot be reached"):
        publish(project_copy, "cpu-smoke", cache, f"{registry.host}/verlenv", target)
    killer.join()
    assert not target.exists()
    revived = services.start_registry(registry.storage, registry.port)
    try:
        done = publish(project_copy, "cpu-smoke", cache, f"{revived.host}/verlenv", target)
        assert list(json.loads(target.read_text())["images"]) == ["cpu-smoke"] and done.entry.digest.startswith(
            "sha256:"
        )
    finally:
        revived.stop()
