"""The wheelhouse against a real HTTP index on loopback: download, hash checks, resume, offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fakeproject import make_project
from tests.helpers.fakewheels import build_wheel, sha256
from tests.helpers.localindex import serve
from verlenv.errors import IntegrityError, ResolutionError
from verlenv.lock.lockfile import read_lock
from verlenv.profiles.profile import load_profile
from verlenv.wheels.wheelhouse import choose, fill, target_tags


@pytest.fixture
def wheels(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "index"
    folder.mkdir()
    return [
        build_wheel(folder, "alpha", "1.0", {"alpha/__init__.py": b"a" * 300_000}),
        build_wheel(folder, "beta", "2.0", {"beta/__init__.py": b"b"}, requires=["alpha>=1"]),
    ]


def _fill(project, **kw):  # type: ignore[no-untyped-def]
    profile = load_profile(project.paths, "fake")
    return fill(profile, read_lock(project.paths.lock("fake")), project.cache, quiet=True, **kw)


def test_download_fills_the_content_addressed_cache(tmp_path, wheels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels, cache_them=False)
    with serve(wheels[0].parent) as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        house = _fill(project)
    assert house.downloaded == 2
    for wheel in wheels:
        stored = project.cache.file_dir(sha256(wheel)) / wheel.name
        assert stored.read_bytes() == wheel.read_bytes()
    assert {f.name for f in house.files} == {"alpha", "beta"}


def test_second_fill_is_offline(tmp_path, wheels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels, cache_them=False)
    with serve(wheels[0].parent) as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        _fill(project)
    monkeypatch.setenv("VERLENV_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    house = _fill(project, offline=True)
    assert house.downloaded == 0 and len(house.files) == 2


def test_offline_with_missing_files_names_them(tmp_path, wheels) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels, cache_them=False)
    with pytest.raises(ResolutionError, match=r"offline, and 2 locked file\(s\) are not cached: alpha==1.0, beta==2.0"):
        _fill(project, offline=True)


def test_hash_mismatch_on_arrival_names_file_and_hashes_and_keeps_nothing(tmp_path, wheels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels, cache_them=False)
    lock = project.paths.lock("fake")
    good = sha256(wheels[0])
    wrong = "0" * 64
    lock.write_text(lock.read_text().replace(good, wrong))
    with serve(wheels[0].parent, fake_hashes={wheels[0].name: wrong}) as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        with pytest.raises(IntegrityError) as info:
            _fill(project)
    message = info.value.message
    assert wheels[0].name in message and f"expected {wrong}" in message and f"got {good}" in message
    assert not list(project.cache.tmp.glob("*.part"))
    assert not project.cache.file_dir(wrong).exists()


def test_a_corrupt_cached_file_is_named_offline_with_both_hashes_exit_6(tmp_path, wheels) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels)
    good = sha256(wheels[0])
    stored = project.cache.file_dir(good) / wheels[0].name
    stored.write_bytes(stored.read_bytes()[:-10] + b"tampered!!")  # size kept, mtime changes
    bad = sha256(stored)
    with pytest.raises(IntegrityError) as info:
        _fill(project, offline=True)
    assert info.value.exit_code == 6
    assert f"{stored} failed its hash: expected sha256 {good}, it hashes to {bad}" in info.value.message
    assert stored.exists()  # nothing deleted behind the user's back offline


def test_a_corrupt_cached_file_is_fetched_again_online_with_a_warning(tmp_path, wheels, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels)
    good = sha256(wheels[0])
    stored = project.cache.file_dir(good) / wheels[0].name
    stored.write_bytes(stored.read_bytes()[:-10] + b"tampered!!")
    with serve(wheels[0].parent) as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        _fill(project)
    err = capsys.readouterr().err
    assert "failed its hash" in err and f"fetching {wheels[0].name.split('-')[0]}" in err
    assert sha256(project.cache.file_dir(good) / wheels[0].name) == good


def test_partial_download_resumes_with_range(tmp_path, wheels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = make_project(tmp_path / "p", wheels, cache_them=False)
    data = wheels[0].read_bytes()
    (project.cache.tmp / f"{sha256(wheels[0])}.part").write_bytes(data[: len(data) // 2])
    with serve(wheels[0].parent) as (url, ranges):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        _fill(project)
    assert ranges == [f"bytes={len(data) // 2}-"]
    assert (project.cache.file_dir(sha256(wheels[0])) / wheels[0].name).read_bytes() == data


def test_choose_prefers_the_best_wheel_for_the_platform() -> None:
    from verlenv.lock.index import IndexFile
    from verlenv.lock.lockfile import LockedDist

    tags = target_tags("3.11", "x86_64-manylinux_2_36")
    files = [
        IndexFile("x-1.0.tar.gz", "u", "a"),
        IndexFile("x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "u", "b"),
        IndexFile("x-1.0-cp311-cp311-manylinux_2_39_x86_64.whl", "u", "c"),
        IndexFile("x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "u", "d"),
        IndexFile("x-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "u", "e"),
        IndexFile("x-1.0-cp311-cp311-manylinux_2_28_aarch64.whl", "u", "f"),
    ]
    dist = LockedDist("x", "1.0", ("a", "b", "c", "d", "e", "f"))
    assert choose(dist, files, tags).filename == "x-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    only_sdist = LockedDist("x", "1.0", ("a", "c"))
    assert choose(only_sdist, files, tags).filename == "x-1.0.tar.gz"
    assert choose(LockedDist("x", "1.0", ("zzz",)), files, tags) is None
