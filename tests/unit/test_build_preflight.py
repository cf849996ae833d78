"""The build refuses, before touching the engine: stale lock, missing/foreign/failed verify report,
unpinned registry base. Each with exit code and message; nothing is built."""

from __future__ import annotations

import json

import pytest

from verlenv.cli import main
from verlenv.image.context import source_date_epoch
from verlenv.paths import ProjectPaths


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


def test_a_registry_base_is_refused_even_when_pinned(project: ProjectPaths, capsys) -> None:  # type: ignore[no-untyped-def]
    """verlenv assembles every layer itself; a registry base's layers would not be its own."""
    with project.bases.open("a") as handle:
        handle.write(
            '\n[bases."pinned"]\nkind = "registry"\nimage = "example/python:3.11"\npython = "3.11"\nglibc = "2.36"\n'
            'digest = "sha256:' + "a" * 64 + '"\n'
        )
    path = project.profile("cpu-smoke")
    path.write_text(path.read_text().replace('base = "debian12-python3.11"', 'base = "pinned"'))
    code, err = _build(capsys)
    assert code == 2
    assert "base 'pinned' is a registry image" in err and "debian base" in err


def test_source_date_epoch_comes_from_the_lock_snapshot() -> None:
    assert source_date_epoch("2026-09-25T00:00:00Z") == 1790294400
