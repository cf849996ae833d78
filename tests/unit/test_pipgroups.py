"""Splitting a layer's wheels for parallel pips: wheels that would write one path stay together, in
their order; the rest spread over the groups. Real wheels, written here."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fakewheels import build_wheel
from verlenv.image.pipgroups import install_groups, installed_paths
from verlenv.wheels.wheelhouse import HouseFile

SCRIPTS = b"[console_scripts]\ntool = e.cli:main\n"


def _house(tmp_path: Path, name: str, files: dict[str, bytes]) -> HouseFile:
    path = build_wheel(tmp_path, name, "1.0", files)
    return HouseFile(name, "1.0", path.name, "", path)


def _wheels(tmp_path: Path) -> list[HouseFile]:
    return [
        _house(tmp_path, "a", {"a/__init__.py": b"A = 1\n" * 400}),
        _house(tmp_path, "b", {"b/__init__.py": b"B = 1\n"}),
        _house(tmp_path, "c", {"shared/x.py": b"from c\n"}),  # a module two wheels ship
        _house(tmp_path, "d", {"shared/x.py": b"from d\n"}),
        _house(tmp_path, "e", {"e/cli.py": b"def main(): pass\n", "e-1.0.dist-info/entry_points.txt": SCRIPTS}),
        _house(tmp_path, "f", {"f-1.0.data/scripts/tool": b"#!python\n"}),  # the same bin/tool as e's
        _house(tmp_path, "g", {"g-1.0.data/purelib/g/mod.py": b"G = 1\n"}),
        _house(tmp_path, "h", {"h-1.0.data/data/lib/python3.11/site-packages/b/__init__.py": b"H\n"}),
        _house(tmp_path, "i", {"i-1.0.data/headers/i.h": b"int i;\n"}),
        _house(tmp_path, "j", {"j-1.0.data/data/bin/tool": b"#!/bin/sh\n"}),  # bin/tool again, as data
    ]


def test_installed_paths_follow_pips_schemes(tmp_path: Path) -> None:
    wheels = {w.name: w for w in _wheels(tmp_path)}
    assert "bin:tool" in installed_paths(wheels["e"].path) and "bin:tool" in installed_paths(wheels["f"].path)
    assert "lib:g/mod.py" in installed_paths(wheels["g"].path)
    assert "lib:b/__init__.py" in installed_paths(wheels["h"].path)
    assert "include:i/i.h" in installed_paths(wheels["i"].path)
    assert "bin:tool" in installed_paths(wheels["j"].path)


def test_colliding_wheels_share_a_group_in_their_order_and_groups_are_disjoint(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path)
    groups = install_groups(wheels, 3)
    assert len(groups) == 3
    assert sorted(w.name for g in groups for w in g) == sorted(w.name for w in wheels)
    where = {w.name: n for n, g in enumerate(groups) for w in g}
    assert where["c"] == where["d"] and where["e"] == where["f"] == where["j"] and where["b"] == where["h"]
    for group in groups:
        order = [w.name for w in group]
        assert order == sorted(order, key=[w.name for w in wheels].index)  # the winner stays the winner
    paths = [set().union(*(installed_paths(w.path) for w in g)) for g in groups]
    assert not (paths[0] & paths[1]) and not (paths[0] & paths[2]) and not (paths[1] & paths[2])


def test_one_group_is_the_original_order_and_no_wheels_one_empty_group(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path)
    assert install_groups(wheels, 1) == [tuple(wheels)]
    assert install_groups([], 4) == [()]
