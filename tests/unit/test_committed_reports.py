"""The committed verify reports describe the committed locks and profiles: a profile or lock that
moved without `verlenv verify` shows here, in CI, without downloading a wheel."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile, profile_names

NAMES = profile_names(ProjectPaths(REPO))


@pytest.mark.parametrize("name", NAMES)
def test_the_verify_report_is_of_this_lock_and_this_base(repo_paths, name: str) -> None:  # type: ignore[no-untyped-def]
    report = json.loads((repo_paths.lockfiles / f"{name}.verify.json").read_text())
    lock = read_lock(repo_paths.lock(name))
    assert report["lock_sha256"] == lock.sha256, f"{name}: lock changed since verify; run verlenv verify"
    assert report["base"] == load_profile(repo_paths, name).base.name, f"{name}: base changed since verify"
    assert report["distributions"] == len(lock.dists)
