"""The registry client against an in-memory fake: the protocol's edge cases and every hash check."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fakeregistry import FakeState, fake_registry
from verlenv.errors import IntegrityError, ServiceError
from verlenv.loopback import free_port
from verlenv.release.regauth import PASSWORD_ENV, USERNAME_ENV, Credentials
from verlenv.release.regclient import RegistryClient, sha256_digest
from verlenv.release.regtls import fallback_allowed, is_loopback

SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"


@pytest.fixture(autouse=True)
def no_machine_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-docker-config"))
    monkeypatch.delenv(USERNAME_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)


@pytest.fixture
def state() -> FakeState:
    return FakeState()


@pytest.fixture
def client(state: FakeState) -> Iterator[RegistryClient]:
    with fake_registry(state) as url:
        yield RegistryClient(url)


def test_upload_follows_a_relative_location_and_skips_what_exists(client: RegistryClient, state: FakeState) -> None:
    blob = b"layer bytes" * 1000
    digest = sha256_digest(blob)
    assert client.upload_blob("repo", digest, blob) is True
    assert state.blobs[digest] == blob
    assert client.upload_blob("repo", digest, blob) is False
    assert [r for r in state.requests if r.startswith("POST")] == ["POST /v2/repo/blobs/uploads/"]


def test_upload_streams_from_a_file(client: RegistryClient, state: FakeState, tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"\x01" * (3 << 20))
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert client.upload_blob("repo", digest, path) and state.blobs[digest] == path.read_bytes()


def test_manifest_round_trip_by_tag_and_digest(client: RegistryClient) -> None:
    body = b'{"schemaVersion": 2}'
    digest = client.put_manifest("repo", "v1", body, SCHEMA2)
    assert digest == sha256_digest(body)
    assert client.get_manifest("repo", digest).data == body
    assert client.get_manifest("repo", "v1").digest == digest
    assert client.manifest_digest("repo", "v1") == digest
    assert client.find_manifest("repo", "nope") is None and client.manifest_digest("repo", "nope") is None


def test_a_manifest_whose_bytes_do_not_match_its_digest_is_refused(client: RegistryClient, state: FakeState) -> None:
    body = b'{"schemaVersion": 2, "layers": []}'
    digest = client.put_manifest("repo", "v1", body, SCHEMA2)
    state.corrupt[digest] = body.replace(b"[]", b"[ ]")
    with pytest.raises(IntegrityError, match=f"expected {digest}, the bytes received hash to sha256:") as info:
        client.get_manifest("repo", digest)
    assert info.value.exit_code == 6 and "repo@" + digest in info.value.message
    with pytest.raises(IntegrityError):  # by tag: the bytes against the registry's own digest header
        client.get_manifest("repo", "v1")


def test_a_manifest_put_answered_with_another_digest_is_refused(client: RegistryClient, state: FakeState) -> None:
    state.lie_on_put = "sha256:" + "0" * 64
    with pytest.raises(IntegrityError, match="stored repo:v1 as sha256:000"):
        client.put_manifest("repo", "v1", b"{}", SCHEMA2)


def test_blob_reads_follow_redirects_and_are_verified(client: RegistryClient, state: FakeState, tmp_path: Path) -> None:
    blob = b"config json"
    digest = sha256_digest(blob)
    state.blobs[digest] = blob
    assert client.get_blob("repo", digest) == blob
    assert client.download_blob("repo", digest, tmp_path / "out" / "blob").read_bytes() == blob
    state.corrupt[digest] = b"config jsoN"
    with pytest.raises(IntegrityError, match=f"blob .*{digest} does not match its digest"):
        client.get_blob("repo", digest)
    with pytest.raises(IntegrityError):
        client.download_blob("repo", digest, tmp_path / "bad" / "blob")
    assert list((tmp_path / "bad").iterdir()) == []  # no target, no temp file


def test_basic_auth_asks_once_then_sends_credentials(state: FakeState) -> None:
    state.basic = ("ann", "pw")
    with fake_registry(state) as url:
        client = RegistryClient(url, credentials=Credentials("ann", "pw", "test"))
        client.ping()
        client.manifest_digest("repo", "v1")
    assert [r.split()[0] for r in state.requests] == ["GET", "GET", "HEAD"]  # one 401, then authorized


def test_basic_auth_refused_names_user_and_source_never_the_password(state: FakeState) -> None:
    state.basic = ("ann", "pw")
    with fake_registry(state) as url:
        with pytest.raises(ServiceError) as info:
            RegistryClient(url, credentials=Credentials("ann", "hunter2", "config.json")).ping()
        assert "refused the credentials of user 'ann' (from config.json)" in info.value.message
        assert "hunter2" not in info.value.render() and info.value.exit_code == 5
        with pytest.raises(ServiceError, match="wants credentials and none were found"):
            RegistryClient(url).ping()


def test_nothing_listening_on_loopback_names_both_schemes() -> None:
    with pytest.raises(ServiceError, match=r"cannot be reached over https .* nor over plain HTTP") as info:
        RegistryClient(f"127.0.0.1:{free_port()}").ping()
    assert "CA: the system store" in info.value.message


def test_plain_http_is_only_a_loopback_fallback_and_never_after_a_certificate_failure() -> None:
    import ssl

    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost") and is_loopback("[::1]:5000")
    assert not is_loopback("registry.example.com:5000") and not is_loopback("10.0.0.1")
    assert fallback_allowed(ConnectionRefusedError()) and fallback_allowed(ssl.SSLError())
    assert not fallback_allowed(ssl.SSLCertVerificationError())
