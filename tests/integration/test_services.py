"""The dev services for real: engine, loopback registry, push and pull by digest, no network."""

from __future__ import annotations

import io
import json
import tarfile
import uuid

import pytest

from verlenv.cli import main
from verlenv.image import services


def _scratch_context(payload: bytes) -> io.BytesIO:
    """A build context for `FROM scratch` + one file: needs no base image and no network."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (
            ("Dockerfile", b"FROM scratch\nCOPY payload.txt /payload.txt\nLABEL io.verlenv.test=1\n"),
            ("payload.txt", payload),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def test_engine_runs_without_a_default_bridge(engine) -> None:  # type: ignore[no-untyped-def]
    assert engine.ping()
    names = {n.name for n in engine.networks.list()}
    assert "bridge" not in names, "dockerd must run with --bridge=none"
    assert {"host", "none"} <= names


def test_registry_push_and_pull_by_digest(engine, registry: services.Registry) -> None:  # type: ignore[no-untyped-def]
    payload = uuid.uuid4().hex.encode()
    repo = f"{registry.host}/verlenv-test/scratch"
    image, _ = engine.images.build(
        fileobj=_scratch_context(payload),
        custom_context=True,
        tag=f"{repo}:t",
        network_mode="none",
        rm=True,
        forcerm=True,
    )
    # The registry fixture untags {registry.host}/... afterwards, pass or fail.
    lines = [json.loads(x) for x in engine.api.push(repo, tag="t", stream=True, decode=False)]
    assert not [x for x in lines if "error" in x], lines
    digest = next(x["aux"]["Digest"] for x in lines if "aux" in x)
    engine.images.remove(image.id, force=True)
    pulled = engine.images.pull(f"{repo}@{digest}")
    assert pulled.labels["io.verlenv.test"] == "1"
    assert f"{repo}@{digest}" in pulled.attrs["RepoDigests"]


def test_registry_listens_on_loopback_only(registry: services.Registry) -> None:
    assert registry.host.startswith("127.0.0.1:")
    assert registry.answers()
    registry.stop()
    assert not registry.answers()


def test_services_status_reports_engine_up(engine, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main(["services", "status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["services"]["docker-engine"] == "up"
    assert report["services"]["programs"] == "all installed"


def test_services_up_is_idempotent(engine) -> None:  # type: ignore[no-untyped-def]
    assert main(["services", "up"]) == 0
    assert main(["services", "up"]) == 0
