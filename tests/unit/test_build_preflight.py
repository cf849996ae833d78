"""The build refuses, before touching the engine: stale lock, missing/foreign/failed verify report,
unpinned registry base. Each with exit code and message; nothing is built."""

from __future__ import annotations

import json

import pytest

from verlenv.cli import main
from verlenv.image.context import render_dockerfile, source_date_epoch
from verlenv.paths import ProjectPaths

REPO_TEMPLATE = "images/Dockerfile.template"


def _build(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["build", "--profile", "cpu-smoke", "-q"])
    return code, capsys.readouterr().err


def test_stale_lock_is_refused(project: ProjectPaths, capsys) -> None:  # type: ignore[no-untyped-def]
    path = project.profile("cpu-smoke")
    path.write_text(path.read_text().replace('spec = "peft"', 'spec = "peft>=0.1"'))
    code, err = _build(capsys)
    assert code == 1 and "refusing to build cpu-smoke: its lock is stale" in err


def test_missing_verify_report_is_refused(project: ProjectPaths, capsys) -> None:  # type: ignore[no-untyped-def]
    (project.lockfiles / "cpu-smoke.verify.json").unlink()
    code, err = _build(capsys)
    assert code == 1 and "no verify report" in err and "verlenv verify --profile cpu-smoke" in err


def test_report_for_another_lock_is_refused(project: ProjectPaths, capsys) -> None:  # type: ignore[no-untyped-def]
    report = project.lockfiles / "cpu-smoke.verify.json"
    data = json.loads(report.read_text())
    data["lock_sha256"] = "0" * 64
    report.write_text(json.dumps(data))
    code, err = _build(capsys)
    assert code == 1 and "was made for another lock" in err


def test_failed_verify_report_is_refused(project: ProjectPaths, capsys) -> None:  # type: ignore[no-untyped-def]
    report = project.lockfiles / "cpu-smoke.verify.json"
    data = json.loads(report.read_text())
    data["ok"] = False
    report.write_text(json.dumps(data))
    code, err = _build(capsys)
    assert code == 1 and "its verify report failed" in err


def test_unpinned_registry_base_is_refused_unless_opted_out(project: ProjectPaths, capsys) -> None:  # type: ignore[no-untyped-def]
    with project.bases.open("a") as handle:
        handle.write(
            '\n[bases."tag-only"]\nkind = "registry"\nimage = "example/python:3.11"\npython = "3.11"\nglibc = "2.36"\n'
        )
    path = project.profile("cpu-smoke")
    path.write_text(path.read_text().replace('base = "debian12-python3.11"', 'base = "tag-only"'))
    code, err = _build(capsys)
    assert code == 2
    assert "base 'tag-only' (example/python:3.11) is not pinned by digest" in err
    assert "--allow-unpinned-base" in err and "README" in err


def test_dockerfile_orders_layers_and_keeps_wheels_in_the_builder(repo_paths: ProjectPaths) -> None:
    text = render_dockerfile(repo_paths.root / REPO_TEMPLATE, "p", "base:1", ["torch", "engine", "deps", "verl"], 42)
    final = text[text.index("\nFROM base:1\n") :]
    copies = [line for line in final.splitlines() if line.startswith("COPY --from=")]
    assert copies == [f"COPY --from=layer-{n} /layers/{n}/ /opt/venv/" for n in ("torch", "engine", "deps", "verl")]
    # Each layer installs in its own stage, so a change above it leaves its stage image (and the
    # engine's cached hash of what COPY --from reads there) untouched.
    stages = [line for line in text.splitlines() if line.startswith("FROM builder AS ")]
    assert stages == [f"FROM builder AS layer-{n}" for n in ("torch", "engine", "deps", "verl")]
    assert "/wheels/" not in final and "pip install" not in final
    assert text.count("--no-index --no-deps --require-hashes") == 4
    assert "SOURCE_DATE_EPOCH=42" in final and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in final
    # the self-check records its ELF scan, so doctor in a container re-reads only what changed since
    assert final.rstrip().endswith("RUN verlenv clean --check && verlenv doctor --static --write-elf-cache")


def test_packed_layers_come_from_their_wheels_images_and_verlenv_from_the_context(repo_paths: ProjectPaths) -> None:
    packed = {"torch": "verlenv/wheels:torch-0123456789abcdef", "deps": "verlenv/wheels:deps-fedcba9876543210"}
    text = render_dockerfile(repo_paths.root / REPO_TEMPLATE, "p", "base:1", ["torch", "deps", "verlenv"], 42, packed)
    copies = [line for line in text.splitlines() if line.startswith("COPY ") and "/wheels/" in line]
    assert copies == [
        "COPY --from=verlenv/wheels:torch-0123456789abcdef /wheels/torch/ /wheels/torch/",
        "COPY --from=verlenv/wheels:deps-fedcba9876543210 /wheels/deps/ /wheels/deps/",
        "COPY layers/verlenv/ /wheels/verlenv/",
    ]


def test_source_date_epoch_comes_from_the_lock_snapshot() -> None:
    assert source_date_epoch("2026-09-25T00:00:00Z") == 1790294400
