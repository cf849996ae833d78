"""Shared fixtures: a throwaway copy of the project's data so tests can edit profiles and locks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from verlenv.paths import ROOT_ENV, ProjectPaths

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProjectPaths:
    """A copy of images/ and lockfiles/ in a temp dir, selected through $VERLENV_ROOT."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "images", root / "images")
    shutil.copytree(REPO / "lockfiles", root / "lockfiles")
    monkeypatch.setenv(ROOT_ENV, str(root))
    return ProjectPaths(root)


@pytest.fixture
def repo_paths() -> ProjectPaths:
    return ProjectPaths(REPO)
