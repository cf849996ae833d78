"""Where registry credentials and CAs come from, and how a 401 challenge is read."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from verlenv.errors import ConfigError
from verlenv.release import regtls
from verlenv.release.regauth import Credentials, find_credentials, normalize_host, parse_challenge

HOST = "reg.example:5000"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"DOCKER_CONFIG": str(tmp_path), "PATH": os.environ["PATH"], **extra}


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _helper(tmp_path: Path, name: str, body: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / f"docker-credential-{name}"
    script.write_text(f"#!/bin/sh\nread -r server || true\n{body}\n")
    script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_bearer_challenge_with_quoted_commas_and_several_scopes() -> None:
    challenge = parse_challenge(
        'Bearer realm="https://auth.example/token?x=1,y",service="registry.example",'
        'scope="repository:a:pull repository:b:pull,push",error="insufficient_scope"'
    )
    assert challenge.scheme == "bearer" and challenge.realm == "https://auth.example/token?x=1,y"
    assert challenge.service == "registry.example"
    assert challenge.scopes == ("repository:a:pull", "repository:b:pull,push")
    assert parse_challenge('Basic realm="Registry Realm"').scheme == "basic"


def test_environment_credentials_win(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auths": {HOST: {"auth": _auth("cfg", "x")}}}))
    found = find_credentials(HOST, _env(tmp_path, VERLENV_REGISTRY_USERNAME="env", VERLENV_REGISTRY_PASSWORD="pw"))
    assert found == Credentials("env", "pw", "env VERLENV_REGISTRY_USERNAME/VERLENV_REGISTRY_PASSWORD")
    assert "pw" not in repr(found)


@pytest.mark.parametrize("key", [HOST, f"https://{HOST}", f"http://{HOST}", f"https://{HOST}/v1/", f"{HOST}/v2/"])
def test_config_auths_keys_match_the_way_docker_writes_them(tmp_path: Path, key: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auths": {key: {"auth": _auth("ann", "p:w")}}}))
    assert find_credentials(HOST, _env(tmp_path)) == Credentials("ann", "p:w", str(tmp_path / "config.json"))
    assert find_credentials("other:5000", _env(tmp_path)) is None
    assert normalize_host(key) == HOST


def test_cred_helper_for_the_host_then_creds_store_then_auths(tmp_path: Path) -> None:
    answer = 'printf \'{"Username":"%s","Secret":"s3"}\' "helper-$server"'
    path = _helper(tmp_path, "one", answer)
    config = {"credHelpers": {HOST: "one"}, "auths": {HOST: {"auth": _auth("cfg", "x")}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert find_credentials(HOST, _env(tmp_path, PATH=path)) == Credentials(
        f"helper-{HOST}", "s3", "docker-credential-one"
    )
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "one"}))
    assert find_credentials(HOST, _env(tmp_path, PATH=path)).source == "docker-credential-one"  # type: ignore[union-attr]


def test_a_helper_with_nothing_stored_falls_back_to_auths(tmp_path: Path) -> None:
    path = _helper(tmp_path, "empty", "echo 'credentials not found in native keychain'; exit 1")
    config = {"credsStore": "empty", "auths": {f"https://{HOST}": {"auth": _auth("cfg", "x")}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert find_credentials(HOST, _env(tmp_path, PATH=path)).username == "cfg"  # type: ignore[union-attr]


def test_an_identity_token_is_not_a_password(tmp_path: Path) -> None:
    path = _helper(tmp_path, "oauth", 'echo \'{"Username":"<token>","Secret":"refresh"}\'')
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {HOST: "oauth"}}))
    assert find_credentials(HOST, _env(tmp_path, PATH=path)) is None


def test_a_helper_that_is_not_installed_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {HOST: "missing-xyz"}}))
    with pytest.raises(ConfigError, match="docker-credential-missing-xyz is not on PATH"):
        find_credentials(HOST, _env(tmp_path))


def test_no_config_means_anonymous(tmp_path: Path) -> None:
    assert find_credentials(HOST, _env(tmp_path / "nowhere")) is None


def test_ca_from_argument_then_env_then_docker_certs_d_then_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs_d = tmp_path / "certs.d"
    (certs_d / HOST).mkdir(parents=True)
    (certs_d / HOST / "ca.crt").write_text("pem")
    monkeypatch.setattr(regtls, "DOCKER_CERTS_D", certs_d)
    monkeypatch.delenv(regtls.CA_ENV, raising=False)
    assert regtls.https_endpoint(HOST).ca == str(certs_d / HOST / "ca.crt")
    assert regtls.https_endpoint("other:1").ca == ""
    assert regtls.https_endpoint("other:1").describe() == "https://other:1 (CA: the system store)"
    monkeypatch.setenv(regtls.CA_ENV, "/env/ca.pem")
    assert regtls.https_endpoint(HOST).ca == "/env/ca.pem"
    assert regtls.https_endpoint(HOST, tmp_path / "arg.pem").ca == str(tmp_path / "arg.pem")


def test_explicit_scheme_and_host_forms() -> None:
    assert regtls.split_scheme("http://127.0.0.1:5000/") == ("http", "127.0.0.1:5000")
    assert regtls.split_scheme("https://reg.example") == ("https", "reg.example")
    assert regtls.split_scheme("reg.example:443") == ("", "reg.example:443")
    assert regtls.hostname("[::1]:5000") == "::1" and regtls.hostname("reg.example:443") == "reg.example"
