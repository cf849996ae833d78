"""Blob and manifest bytes (deterministic gzip, schema-2, the attachment), the pull checks and tool lines."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fakeregistry import FakeState, fake_registry
from tests.helpers.ociimage import make_image
from verlenv.errors import CheckFailed, ConfigError, IntegrityError, ServiceError
from verlenv.release import attachment, catalog, httppull, ocipush, publish
from verlenv.release.attachment import Attachment, Descriptor
from verlenv.release.regclient import RegistryClient, sha256_digest
from verlenv.release.regtls import Endpoint

DIGEST = "sha256:" + "ab" * 32
IMAGE_ID = "sha256:" + "cd" * 32


def _entry(**changes: Any) -> catalog.Entry:
    fields: dict[str, Any] = {
        "profile": "cpu-smoke",
        "repository": "127.0.0.1:5000/team/verlenv",
        "digest": DIGEST,
        "tags": [],
        "lock_sha256": "1" * 64,
        "image_id": IMAGE_ID,
        "components": {"torch": "2.13.0+cpu"},
        "acceptance": {},
        "attachment": attachment.attachment_tag(DIGEST),
        "labels": {},
    }
    return catalog.Entry(**{**fields, **changes})


@pytest.fixture
def client() -> Iterator[RegistryClient]:
    with fake_registry(FakeState()) as url:
        yield RegistryClient(url)


# --- deterministic gzip and the layer cache ------------------------------------------------------


def test_gzip_is_python_gzipfile_at_level_6_with_mtime_0_and_no_name(tmp_path: Path) -> None:
    source = tmp_path / "layer.tar"
    source.write_bytes(b"".join(bytes([i % 251]) * (i % 7000) for i in range(600)))  # > 1 MiB: several chunks
    out, reference = io.BytesIO(), io.BytesIO()
    digest, size = ocipush.deterministic_gzip(source, out)
    data = out.getvalue()
    with gzip.GzipFile(fileobj=reference, mode="wb", compresslevel=6, mtime=0, filename="") as handle:
        handle.write(source.read_bytes())  # one write: deflate output does not depend on how input is fed
    assert data == reference.getvalue()
    assert data[:10] == bytes((0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 255)) and size == len(data)
    assert digest == sha256_digest(data) and gzip.decompress(data) == source.read_bytes()


def test_a_second_push_reuses_the_cached_blob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = make_image(tmp_path / "image", {}).layers[0]
    first = ocipush.compressed_layer(layer, tmp_path / "cache")
    index = json.loads((tmp_path / "cache" / "diffids" / "sha256" / f"{first.diff_id[7:]}.json").read_text())
    assert index["digest"] == first.digest and index["gzip_level"] == 6

    def no_compressing(*args: object) -> None:
        raise AssertionError("compressed again")

    monkeypatch.setattr(ocipush, "deterministic_gzip", no_compressing)
    assert ocipush.compressed_layer(layer, tmp_path / "cache") == first


def test_a_layer_that_is_not_the_one_the_config_names_is_refused(tmp_path: Path) -> None:
    layer = make_image(tmp_path / "image", {}).layers[0]
    with pytest.raises(IntegrityError, match="the image config says sha256:000"):
        ocipush.compressed_layer(layer, tmp_path / "cache", "sha256:" + "0" * 64)


def test_the_config_must_list_one_diff_id_per_layer(client: RegistryClient, tmp_path: Path) -> None:
    image = make_image(tmp_path / "image", {})
    with pytest.raises(ConfigError, match="lists 2 layers, 1 layer files were given"):
        ocipush.push_image(client, "r", "t", image.config, image.layers[:1], tmp_path / "cache")


# --- manifests ---------------------------------------------------------------------------------


def test_schema2_manifest_is_serialized_as_dockerd_writes_it() -> None:
    layer = ocipush.LayerBlob("sha256:" + "1" * 64, "sha256:" + "2" * 64, 42, Path("x"))
    body = ocipush.schema2_manifest(Descriptor(ocipush.CONTAINER_CONFIG, "sha256:" + "3" * 64, 7), [layer])
    assert body.decode() == (
        "{\n"
        '   "schemaVersion": 2,\n'
        '   "mediaType": "application/vnd.docker.distribution.manifest.v2+json",\n'
        '   "config": {\n'
        '      "mediaType": "application/vnd.docker.container.image.v1+json",\n'
        '      "size": 7,\n'
        f'      "digest": "sha256:{"3" * 64}"\n'
        "   },\n"
        '   "layers": [\n'
        "      {\n"
        '         "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",\n'
        '         "size": 42,\n'
        f'         "digest": "sha256:{"2" * 64}"\n'
        "      }\n"
        "   ]\n"
        "}"
    )


def test_nothing_is_tagged_unless_every_blob_arrived(tmp_path: Path) -> None:
    image = make_image(tmp_path / "image", {})
    state = FakeState()
    last = ocipush.compressed_layer(image.layers[1], tmp_path / "cache")
    state.reject_uploads.add(last.digest)
    with fake_registry(state) as url, pytest.raises(ServiceError, match="answered 500"):
        ocipush.push_image(RegistryClient(url), "r", "t", image.config, image.layers, tmp_path / "cache")
    assert not [r for r in state.requests if "/manifests/" in r]


def test_the_attachment_is_an_oci_artifact_that_names_its_subject(client: RegistryClient, tmp_path: Path) -> None:
    subject = Descriptor(ocipush.SCHEMA2_MANIFEST, DIGEST, 523)
    report = {"passed": True, "image_id": IMAGE_ID, "steps": [1, 2]}
    pushed = ocipush.push_attachment(client, "r", subject, report)
    assert pushed.tag == publish.attachment_tag(DIGEST) == f"sha256-{'ab' * 32}.acceptance"
    body = client.get_manifest("r", pushed.digest).parsed()
    assert body["mediaType"] == attachment.OCI_MANIFEST and body["subject"]["digest"] == DIGEST
    assert body["config"]["mediaType"] == attachment.CONFIG_MEDIA_TYPE
    assert body["layers"][0]["mediaType"] == attachment.REPORT_MEDIA_TYPE
    assert body["annotations"] == {
        "io.verlenv.acceptance-for": DIGEST,
        "io.verlenv.acceptance-image-id": IMAGE_ID,
        "io.verlenv.acceptance-passed": "true",
    }
    found = attachment.read_attachment(client, "r", DIGEST)
    assert found is not None and found.report == report and found.vouches_for == DIGEST
    assert ocipush.push_attachment(client, "r", subject, report).digest == pushed.digest  # deterministic


# --- pull checks and tool lines ------------------------------------------------------------------


def _found(**report: Any) -> Attachment:
    return Attachment({"passed": True, "image_id": IMAGE_ID, **report}, DIGEST, "sha256:" + "9" * 64, "oci-artifact")


def test_attachment_checks() -> None:
    entry = _entry()
    assert httppull.check_attachment(_found(), entry, {})["passed"] is True
    with pytest.raises(CheckFailed, match="no acceptance report is attached"):
        httppull.check_attachment(None, entry, {})
    with pytest.raises(CheckFailed, match="is for image sha256:eeee"):
        httppull.check_attachment(_found(image_id="sha256:" + "ee" * 32), entry, {})
    with pytest.raises(CheckFailed, match=r"did not pass \(rollout\)"):
        httppull.check_attachment(_found(passed=False, verdicts=[{"name": "rollout", "passed": False}]), entry, {})
    other = Attachment(_found().report, "sha256:" + "77" * 32, "", "oci-artifact")
    with pytest.raises(CheckFailed, match="vouches for sha256:7777"):
        httppull.check_attachment(other, entry, {})


def test_files_manifest_hash_is_checked_only_when_both_sides_have_it() -> None:
    label = httppull.FILES_MANIFEST_LABEL
    report = _found(files_manifest_sha256="f" * 64)
    assert httppull.check_attachment(report, _entry(), {})  # the image and catalog carry none
    assert httppull.check_attachment(report, _entry(), {label: "f" * 64})
    with pytest.raises(CheckFailed, match="the catalog says 000"):
        httppull.check_attachment(report, _entry(labels={label: "0" * 64}), {})


def test_labels_are_checked_against_components_and_recorded_labels() -> None:
    labels = {"io.verlenv.lock-sha256": "1" * 64, "io.verlenv.torch": "2.13.0+cpu"}
    httppull.check_labels(labels, _entry())
    with pytest.raises(CheckFailed, match="label lock-sha256"):
        httppull.check_labels({**labels, "io.verlenv.lock-sha256": "2" * 64}, _entry())
    with pytest.raises(CheckFailed, match=r"torch 2.13.0\+cpu != 2.12.0"):
        httppull.check_labels(labels, _entry(components={"torch": "2.12.0"}))


def test_tool_lines_for_a_plain_http_registry() -> None:
    entry, endpoint = _entry(), Endpoint("127.0.0.1:5000", "http")
    assert httppull.enroot_command(entry, endpoint).line == (
        f"ENROOT_ALLOW_HTTP=yes enroot import -o cpu-smoke-{'ab' * 6}.sqsh "
        f"'docker://127.0.0.1:5000#team/verlenv:{DIGEST}'"
    )
    assert httppull.apptainer_command(entry, endpoint).line == (
        f"APPTAINER_NOHTTPS=true apptainer pull cpu-smoke-{'ab' * 6}.sif docker://127.0.0.1:5000/team/verlenv@{DIGEST}"
    )


def test_tool_lines_for_https_have_no_plain_http_switch() -> None:
    entry, endpoint = _entry(repository="reg.example/team/verlenv"), Endpoint("reg.example", "https")
    enroot = httppull.enroot_command(entry, endpoint)
    assert enroot.env == () and enroot.argv[-1] == f"docker://reg.example#team/verlenv:{DIGEST}"
    assert httppull.apptainer_command(entry, endpoint).line.startswith("apptainer pull cpu-smoke-")
