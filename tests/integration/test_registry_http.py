"""The HTTP registry path against the real Distribution registry (docker-registry 2.8.2) on loopback.

Push a small image made here and read it back; the same input gives the same manifest digest in two
fresh registries; htpasswd auth over TLS with a self-signed CA (credentials from the environment,
from config.json and from a credential helper); Distribution's token auth with a JWT service run
here; and `verlenv pull` refusing a tampered manifest, a wrong label, a missing or failed report
with no Docker engine anywhere (DOCKER_HOST points at a dead socket; ensure_engine must not run).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.htpasswd import write_htpasswd
from tests.helpers.ociimage import MadeImage, make_image
from tests.helpers.pki import Pki, make_pki, make_signer
from tests.helpers.tokenserver import ISSUER, SERVICE, TokenLog, token_server
from verlenv.cli import main
from verlenv.errors import ServiceError
from verlenv.image import services
from verlenv.release import catalog, httppull, ocipush
from verlenv.release import pull as pull_module
from verlenv.release.attachment import attachment_tag, read_attachment
from verlenv.release.regauth import PASSWORD_ENV, USERNAME_ENV
from verlenv.release.regclient import RegistryClient

REPO = "verlenv"
LOCK = "a" * 64
LABELS = {
    "io.verlenv.profile": "cpu-smoke",
    "io.verlenv.lock-sha256": LOCK,
    "io.verlenv.torch": "2.13.0+cpu",
    "io.verlenv.verl": "0.9.1",
}
USER, PASSWORD = "alice", "right-horse-battery"


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def image(tmp_path: Path) -> MadeImage:
    return make_image(tmp_path / "image", LABELS)


@pytest.fixture
def plain_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.Registry]:
    registry = services.start_registry(tmp_path_factory.mktemp("plain-registry"))
    yield registry
    registry.stop()


@pytest.fixture
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_registry(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[services.Registry]:
    """htpasswd auth (bcrypt) over TLS with a certificate for 127.0.0.1 from the test CA."""
    storage = tmp_path_factory.mktemp("tls-registry")
    htpasswd = write_htpasswd(storage / "htpasswd", {USER: PASSWORD})
    registry = services.start_registry(
        storage, auth=services.HtpasswdAuth(htpasswd), tls=services.TLSFiles(pki.server_cert, pki.server_key)
    )
    yield registry
    registry.stop()


@pytest.fixture
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[services.Registry, TokenLog]]:
    """`auth: token`: the realm is a JWT service here, its signing cert the registry's rootcertbundle."""
    signer = make_signer(tmp_path_factory.mktemp("signer"))
    with token_server(signer, {USER: PASSWORD}) as (realm, log):
        auth = services.TokenAuth(realm, SERVICE, ISSUER, signer.cert)
        registry = services.start_registry(tmp_path_factory.mktemp("token-registry"), auth=auth)
        yield registry, log
        registry.stop()


@pytest.fixture(autouse=True)
def isolated_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No credentials leak in from the machine: an empty Docker config dir, no VERLENV_REGISTRY_*."""
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    for name in (USERNAME_ENV, PASSWORD_ENV, "VERLENV_REGISTRY_CA"):
        monkeypatch.delenv(name, raising=False)
    return config_dir


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """DOCKER_HOST at a dead socket, and any call that would reach for an engine recorded and refused."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/verlenv-test/docker.sock")
    calls: list[str] = []

    def refuse(name: str) -> Any:
        def call(*args: object, **kwargs: object) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called on the no-engine path")

        return call

    for name in ("ensure_engine", "engine_answers", "engine_client"):
        monkeypatch.setattr(services, name, refuse(name))
        if hasattr(pull_module, name):
            monkeypatch.setattr(pull_module, name, refuse(name))
    return calls


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`enroot` and `apptainer` on PATH that record their arguments and ENROOT_/APPTAINER_ variables."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "tool-ran"
    bin_dir.mkdir()
    for tool in ("enroot", "apptainer"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\n{{ echo "{tool} $*"; env | grep -E "^(ENROOT|APPTAINER)_" ; }} >> {marker}\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return marker


# --- helpers ------------------------------------------------------------------------------------


def _publish(
    client: RegistryClient, image: MadeImage, cache: Path, report: dict[str, Any] | None = None, attach: bool = True
) -> catalog.Entry:
    pushed = ocipush.push_image(client, REPO, "cpu-smoke-test", image.config, image.layers, cache)
    if attach:
        passing = {"passed": True, "image_id": pushed.config_digest, "host": {"device": "cpu"}, "verdicts": []}
        ocipush.push_attachment(client, REPO, pushed.descriptor, {**passing, **(report or {})})
    return catalog.Entry(
        profile="cpu-smoke",
        repository=f"{client.host}/{REPO}",
        digest=pushed.digest,
        tags=[f"{client.host}/{REPO}:cpu-smoke-test"],
        lock_sha256=LOCK,
        image_id=pushed.config_digest,
        components={"torch": "2.13.0+cpu", "verl": "0.9.1"},
        acceptance={"passed": True},
        attachment=attachment_tag(pushed.digest),
        labels=LABELS,
    )


def _catalog(tmp_path: Path, entry: catalog.Entry) -> str:
    path = tmp_path / "catalog.json"
    catalog.write(path, {entry.profile: entry})
    return str(path)


def _repositories_dir(registry: services.Registry) -> Path:
    return registry.storage / "data" / "docker" / "registry" / "v2" / "repositories"


def _blob_data(registry: services.Registry, digest: str) -> Path:
    hex_digest = digest.removeprefix("sha256:")
    return (
        registry.storage
        / "data"
        / "docker"
        / "registry"
        / "v2"
        / "blobs"
        / "sha256"
        / hex_digest[:2]
        / hex_digest
        / "data"
    )


# --- push and read back; reproducible digests ---------------------------------------------------


def test_push_read_back_verify_and_run_enroot_with_no_engine(  # type: ignore[no-untyped-def]
    plain_registry, image, no_engine, fake_tools, tmp_path, capsys
) -> None:
    client = RegistryClient(plain_registry.host)
    entry = _publish(client, image, tmp_path / "cache")
    assert client.endpoint.scheme == "http"  # loopback without TLS: https could not connect
    manifest = client.get_manifest(REPO, entry.digest).parsed()
    assert manifest["mediaType"] == ocipush.SCHEMA2_MANIFEST and len(manifest["layers"]) == 2
    assert client.get_blob(REPO, entry.image_id) == image.config
    for layer, descriptor in zip(image.layers, manifest["layers"], strict=True):
        fetched = client.download_blob(REPO, descriptor["digest"], tmp_path / "fetched" / layer.name)
        assert gzip.decompress(fetched.read_bytes()) == layer.read_bytes()
    found = read_attachment(client, REPO, entry.digest)
    assert found is not None and found.form == "oci-artifact" and found.vouches_for == entry.digest

    assert main(["pull", "cpu-smoke", "--catalog", _catalog(tmp_path, entry), "--run", "enroot"]) == 0
    out, hexa = capsys.readouterr().out, entry.digest.removeprefix("sha256:")
    enroot = f"ENROOT_ALLOW_HTTP=yes enroot import -o cpu-smoke-{hexa[:12]}.sqsh 'docker://{client.host}#{REPO}:{entry.digest}'"
    apptainer = f"APPTAINER_NOHTTPS=true apptainer pull cpu-smoke-{hexa[:12]}.sif docker://{entry.by_digest}"
    assert enroot in out and apptainer in out and f"image id    {entry.image_id}" in out
    ran = fake_tools.read_text()
    assert f"enroot import -o cpu-smoke-{hexa[:12]}.sqsh docker://{client.host}#{REPO}:{entry.digest}" in ran
    assert "ENROOT_ALLOW_HTTP=yes" in ran and "apptainer" not in ran
    assert main(["pull", entry.tags[0].rsplit(":", 1)[1], "--catalog", _catalog(tmp_path, entry), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["pulled"]
    assert result["image_id"] == entry.image_id and result["enroot"] == enroot and result["apptainer"] == apptainer
    assert result["acceptance_passed"] is True and result["engine_pulled"] is False
    assert no_engine == []


def test_the_same_input_gives_the_same_manifest_digest_in_two_fresh_registries(  # type: ignore[no-untyped-def]
    plain_registry, image, tmp_path, tmp_path_factory
) -> None:
    first = ocipush.push_image(
        RegistryClient(plain_registry.host), REPO, "t", image.config, image.layers, tmp_path / "c1"
    )
    other = services.start_registry(tmp_path_factory.mktemp("second-registry"))
    try:
        # a separate cache: the layers are compressed again, not reused
        second = ocipush.push_image(RegistryClient(other.host), REPO, "t", image.config, image.layers, tmp_path / "c2")
    finally:
        other.stop()
    assert first.digest == second.digest and first.manifest == second.manifest
    assert [b.digest for b in first.layers] == [b.digest for b in second.layers]
    again = ocipush.push_image(
        RegistryClient(plain_registry.host), REPO, "t", image.config, image.layers, tmp_path / "c1"
    )
    assert again.digest == first.digest and again.uploaded == 0


def test_a_blob_is_mounted_from_another_repository_instead_of_uploaded(  # type: ignore[no-untyped-def]
    plain_registry, image, tmp_path
) -> None:
    client = RegistryClient(plain_registry.host)
    pushed = ocipush.push_image(client, "team/base", "t", image.config, image.layers, tmp_path / "cache")
    layer = pushed.layers[1]
    assert client.upload_blob("team/other", layer.digest, layer.path, mount_from="team/base") is True
    assert client.blob_exists("team/other", layer.digest)
    log = (plain_registry.storage / "registry.log").read_text()
    assert f"POST /v2/team/other/blobs/uploads/?mount={layer.digest}&from=team/base" in log.replace("%3A", ":")
    assert "PUT /v2/team/other/blobs/uploads/" not in log  # mounted: no bytes were sent


def test_the_engine_pulls_the_pushed_image_as_the_same_image_id(  # type: ignore[no-untyped-def]
    engine, plain_registry, image, tmp_path, capsys
) -> None:
    from tests.helpers.engine import forget_registry_tags

    entry = _publish(RegistryClient(plain_registry.host), image, tmp_path / "cache")
    try:
        assert main(["pull", "cpu-smoke", "--catalog", _catalog(tmp_path, entry), "--engine"]) == 0
        assert "docker      pulled; the engine's image ID matches" in capsys.readouterr().out
        assert engine.images.get(entry.by_digest).id == image.image_id
    finally:
        forget_registry_tags(engine, plain_registry.host)


def test_an_attachment_published_through_the_engine_still_verifies_over_http(  # type: ignore[no-untyped-def]
    engine, plain_registry, image, tmp_path
) -> None:
    """Catalogs published before the HTTP path carry FROM-scratch attachment images: they must keep verifying."""
    from tests.helpers.engine import forget_registry_tags, legacy_attachment

    client = RegistryClient(plain_registry.host)
    entry = _publish(client, image, tmp_path / "cache", attach=False)
    report = {"passed": True, "image_id": entry.image_id, "host": {"device": "cpu"}, "verdicts": []}
    try:
        assert legacy_attachment(engine, entry.repository, entry.digest, entry.image_id, report) == entry.attachment
    finally:
        forget_registry_tags(engine, plain_registry.host)
    found = read_attachment(client, REPO, entry.digest)
    assert found is not None and found.form == "engine-image" and found.vouches_for == entry.digest
    assert httppull.verify(entry, client).acceptance == report


# --- htpasswd over TLS --------------------------------------------------------------------------


def test_right_credentials_from_the_environment_push_and_verify_over_tls(  # type: ignore[no-untyped-def]
    tls_registry, pki, image, no_engine, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv(USERNAME_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    client = RegistryClient(tls_registry.host, ca_cert=pki.ca_cert)
    entry = _publish(client, image, tmp_path / "cache")
    assert client.endpoint.scheme == "https" and client.endpoint.ca == str(pki.ca_cert)
    verified = httppull.verify(entry, client)
    assert verified.image_id == image.image_id and verified.acceptance["passed"] is True
    code = main(["pull", "cpu-smoke", "--catalog", _catalog(tmp_path, entry), "--ca-cert", str(pki.ca_cert)])
    out = capsys.readouterr().out
    assert code == 0 and f"https://{tls_registry.host} (CA: {pki.ca_cert})" in out
    assert "\n  enroot import -o cpu-smoke-" in out and "ENROOT_ALLOW_HTTP" not in out  # https: no plain-HTTP switch
    assert no_engine == []


def test_wrong_credentials_are_refused_clearly_and_nothing_is_recorded(  # type: ignore[no-untyped-def]
    tls_registry, pki, image, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(USERNAME_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, "wrong-password")
    with pytest.raises(ServiceError) as info:
        _publish(RegistryClient(tls_registry.host, ca_cert=pki.ca_cert), image, tmp_path / "cache")
    message = info.value.render()
    assert info.value.exit_code == 5
    assert f"registry {tls_registry.host} refused the credentials of user '{USER}'" in message
    assert USERNAME_ENV in message and "docker login" in message and "wrong-password" not in message
    assert not _repositories_dir(tls_registry).exists()  # not one blob, let alone a tag


def test_without_the_ca_the_certificate_is_refused_and_the_error_names_the_ca(  # type: ignore[no-untyped-def]
    tls_registry, pki, monkeypatch
) -> None:
    with pytest.raises(
        ServiceError, match=r"https://127\.0\.0\.1:\d+ \(CA: the system store\): its certificate is not"
    ):
        RegistryClient(tls_registry.host).ping()
    monkeypatch.setenv("VERLENV_REGISTRY_CA", str(pki.ca_cert))
    monkeypatch.setenv(USERNAME_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert RegistryClient(tls_registry.host).ping().ca == str(pki.ca_cert)


def test_credentials_from_docker_config_json(  # type: ignore[no-untyped-def]
    tls_registry, pki, image, isolated_credentials, tmp_path
) -> None:
    config = isolated_credentials / "config.json"

    def login(password: str) -> None:
        auth = base64.b64encode(f"{USER}:{password}".encode()).decode()
        config.write_text(json.dumps({"auths": {f"https://{tls_registry.host}/v2/": {"auth": auth}}}))

    login(PASSWORD)
    entry = _publish(RegistryClient(tls_registry.host, ca_cert=pki.ca_cert), image, tmp_path / "cache")
    assert entry.digest.startswith("sha256:")
    login("stale-password")
    with pytest.raises(ServiceError, match=f"user '{USER}' \\(from {config}\\)"):
        RegistryClient(tls_registry.host, ca_cert=pki.ca_cert).ping()


def test_credentials_from_a_credential_helper_on_path(  # type: ignore[no-untyped-def]
    tls_registry, pki, image, isolated_credentials, tmp_path, monkeypatch
) -> None:
    bin_dir, asked = tmp_path / "helper-bin", tmp_path / "helper-asked"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-test"
    helper.write_text(
        "#!/bin/sh\nread -r server || true\n"
        f'echo "$1 $server" >> {asked}\n'
        f'if [ "$1" = get ] && [ "$server" = "{tls_registry.host}" ]; then\n'
        f'  printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}\' "$server"\n'
        "else echo 'credentials not found in native keychain'; exit 1; fi\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (isolated_credentials / "config.json").write_text(json.dumps({"credHelpers": {tls_registry.host: "test"}}))
    client = RegistryClient(tls_registry.host, ca_cert=pki.ca_cert)
    entry = _publish(client, image, tmp_path / "cache")
    assert httppull.verify(entry, client).image_id == image.image_id
    assert asked.read_text().splitlines() == [f"get {tls_registry.host}"]  # asked once, for this host


# --- token auth ---------------------------------------------------------------------------------


def _actions(scope: str) -> tuple[str, frozenset[str]]:
    resource, _, actions = scope.rpartition(":")
    return resource, frozenset(actions.split(","))


def test_bearer_token_challenge_push_and_verify_with_tokens_cached_per_scope(  # type: ignore[no-untyped-def]
    token_registry, image, no_engine, tmp_path, monkeypatch
) -> None:
    registry, log = token_registry
    monkeypatch.setenv(USERNAME_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    client = RegistryClient(registry.host)
    entry = _publish(client, image, tmp_path / "cache")
    assert httppull.verify(entry, client).acceptance["passed"] is True
    # the registry names the actions in either order ("pull,push" or "push,pull"): compare them as sets
    scopes = [tuple(_actions(scope) for scope in scopes) for _, scopes in log.requests]
    push, pull = (_actions(f"repository:{REPO}:pull,push"),), (_actions(f"repository:{REPO}:pull"),)
    # ~12 authenticated requests, one token per scope they needed
    assert len(scopes) == 2 and set(scopes) == {pull, push} and {user for user, _ in log.requests} == {USER}
    assert no_engine == []


def test_bearer_token_refused_or_missing_credentials_say_so(  # type: ignore[no-untyped-def]
    token_registry, monkeypatch
) -> None:
    registry, _ = token_registry
    with pytest.raises(ServiceError, match="wants credentials and none were found"):
        RegistryClient(registry.host).manifest_digest(REPO, "latest")
    monkeypatch.setenv(USERNAME_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, "not-it")
    with pytest.raises(ServiceError, match=f"refused the credentials of user '{USER}' \\(from env {USERNAME_ENV}"):
        RegistryClient(registry.host).manifest_digest(REPO, "latest")


# --- the no-engine pull refuses -----------------------------------------------------------------


def _refused_pull(entry: catalog.Entry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["pull", "cpu-smoke", "--catalog", _catalog(tmp_path, entry), "--run", "enroot"])
    return code, capsys.readouterr().err


def test_a_tampered_manifest_is_refused_with_no_engine(  # type: ignore[no-untyped-def]
    plain_registry, image, no_engine, fake_tools, tmp_path, capsys
) -> None:
    entry = _publish(RegistryClient(plain_registry.host), image, tmp_path / "cache")
    data = _blob_data(plain_registry, entry.digest)
    text = data.read_text()
    layer = json.loads(text)["layers"][0]["digest"]
    forged = layer[:-1] + ("0" if layer[-1] != "0" else "1")  # same length: the registry still serves it
    data.write_text(text.replace(layer, forged))
    code, err = _refused_pull(entry, tmp_path, capsys)
    assert code == 6 and f"manifest {entry.by_digest} does not match its digest: expected {entry.digest}" in err
    assert not fake_tools.exists() and no_engine == []


def test_a_wrong_label_is_refused_with_no_engine(  # type: ignore[no-untyped-def]
    plain_registry, image, no_engine, fake_tools, tmp_path, capsys
) -> None:
    entry = _publish(RegistryClient(plain_registry.host), image, tmp_path / "cache")
    code, err = _refused_pull(replace(entry, components={**entry.components, "torch": "2.12.0+cpu"}), tmp_path, capsys)
    assert code == 1 and "labels differ from the catalog: torch 2.13.0+cpu != 2.12.0+cpu" in err
    assert not fake_tools.exists() and no_engine == []


def test_a_missing_acceptance_report_is_refused_with_no_engine(  # type: ignore[no-untyped-def]
    plain_registry, image, no_engine, fake_tools, tmp_path, capsys
) -> None:
    entry = _publish(RegistryClient(plain_registry.host), image, tmp_path / "cache", attach=False)
    code, err = _refused_pull(entry, tmp_path, capsys)
    assert code == 1 and f"no acceptance report is attached to {entry.by_digest}" in err
    assert not fake_tools.exists() and no_engine == []


def test_a_failed_acceptance_report_is_refused_with_no_engine(  # type: ignore[no-untyped-def]
    plain_registry, image, no_engine, fake_tools, tmp_path, capsys
) -> None:
    failed = {"passed": False, "verdicts": [{"name": "memory-slope", "passed": False}]}
    entry = _publish(RegistryClient(plain_registry.host), image, tmp_path / "cache", report=failed)
    code, err = _refused_pull(entry, tmp_path, capsys)
    assert code == 1 and "did not pass (memory-slope)" in err
    assert not fake_tools.exists() and no_engine == []
