"""The sdists' build backends: locked from images/build-backends.toml, staleness told offline, refused unless fresh."""

from __future__ import annotations

import json

import pytest

from verlenv.cli import main
from verlenv.errors import CheckFailed, ConfigError
from verlenv.lock import backends
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths


def _edit(project: ProjectPaths, old: str, new: str) -> None:
    path = backends.source(project)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_committed_backend_lock_is_fresh_and_hashed(repo_paths: ProjectPaths) -> None:
    assert backends.state(repo_paths)[0] == "fresh"
    locked = read_lock(backends.lock_path(repo_paths))
    assert {d.name for d in locked.dists} >= {"setuptools", "wheel"}
    assert all(d.hashes for d in locked.dists)
    assert backends.constraints(repo_paths) == backends.lock_path(repo_paths)


def test_a_comment_edit_keeps_it_fresh_a_requirement_edit_makes_it_stale(project: ProjectPaths) -> None:
    _edit(project, "# The PEP 517", "# Edited: the PEP 517")
    assert backends.state(project)[0] == "fresh"
    _edit(project, 'requirements = ["setuptools", "wheel"]', 'requirements = ["setuptools<80", "wheel"]')
    found, why = backends.state(project)
    assert found == "stale" and "build-backends.toml changed" in why
    with pytest.raises(CheckFailed) as caught:
        backends.constraints(project)
    assert caught.value.hint == "verlenv lock --build-backends" and "stale" in caught.value.message


def test_lock_check_reports_the_backend_lock(project: ProjectPaths, capsys: pytest.CaptureFixture[str]) -> None:
    backends.lock_path(project).unlink()
    assert main(["lock", "--check", "--json"]) == 1
    states = {row["profile"]: row["state"] for row in json.loads(capsys.readouterr().out)["locks"]}
    assert states.pop("build-backends") == "missing"
    assert set(states.values()) == {"fresh"}


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('snapshot = "2026-09-25"', 'snapshot = "25.09.2026"', "snapshot"),
        ('python = "3.11"', "python = 3.11", "python"),
        ('requirements = ["setuptools", "wheel"]', "requirements = []", "requirements"),
    ],
)
def test_a_bad_field_is_named_with_its_file(project: ProjectPaths, old: str, new: str, field: str) -> None:
    _edit(project, old, new)
    with pytest.raises(ConfigError) as caught:
        backends.load(project)
    assert "build-backends.toml" in caught.value.message and f"field '{field}'" in caught.value.message
    assert backends.state(project)[0] == "invalid"
