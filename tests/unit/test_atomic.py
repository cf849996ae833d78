"""A folder made whole or not at all: what the pip tree, the locked setuptools and verlenv's wheel are kept in."""

from __future__ import annotations

from pathlib import Path

import pytest

from verlenv.atomic import make_folder


def test_a_folder_appears_whole_and_is_made_once(tmp_path: Path) -> None:
    made: list[Path] = []

    def fill(work: Path) -> None:
        made.append(work)
        (work / "a").write_text("1")

    target = tmp_path / "kept" / "key"
    assert make_folder(target, tmp_path, fill) == target
    assert (target / "a").read_text() == "1" and len(made) == 1
    assert make_folder(target, tmp_path, fill) == target and len(made) == 1  # taken as it is
    assert not made[0].exists()


def test_a_failed_fill_leaves_nothing(tmp_path: Path) -> None:
    def fill(work: Path) -> None:
        (work / "half").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        make_folder(tmp_path / "key", tmp_path, fill)
    assert list(tmp_path.iterdir()) == []


def test_when_another_process_got_there_first_its_folder_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "key"

    def fill(work: Path) -> None:  # another process renames its own folder in while this one fills
        (work / "mine").write_text("late")
        target.mkdir()
        (target / "theirs").write_text("first")

    assert make_folder(target, tmp_path, fill) == target
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["key"]
