"""A layer's wheels split into groups that pip can install at the same time into one prefix.

pip unpacks one wheel after another on one core: 24 s of the default deps layer's install while the
second core waited. Wheels whose installed paths are disjoint land the same whatever the order, so
installing them from several pip processes gives the same tree, and (the layer writer sorts and
normalizes) the same layer bytes. Wheels that would write one path (a console script two packages
declare, a module shipped twice) stay in one group, so one pip orders them as a single pip would
(by name, descending: wheelstream.install_order) and the same one wins.
"""

from __future__ import annotations

import configparser
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from verlenv.wheels.wheelhouse import HouseFile

_SITE = re.compile(r"lib/python[^/]+/site-packages/(.+)")
_LIB_SCHEMES = ("purelib", "platlib")


def installed_paths(wheel: Path) -> set[str]:
    """Every path pip writes for ``wheel``, as ``lib:``/``bin:``/``include:``/``data:`` + the path
    below it (enough to tell whether two wheels collide)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        paths = {_placed(name) for name in names}
        for name in names:
            top, _, leaf = name.partition("/")
            if top.endswith(".dist-info") and leaf == "entry_points.txt":
                paths |= {f"bin:{s}" for s in _scripts(archive.read(name).decode(errors="replace"))}
    return paths


def _placed(name: str) -> str:
    top, _, rest = name.partition("/")
    if not (top.endswith(".data") and rest):
        return f"lib:{name}"
    scheme, _, below = rest.partition("/")
    if scheme in _LIB_SCHEMES:
        return f"lib:{below}"
    if scheme == "scripts":
        return f"bin:{below}"
    if scheme == "headers":
        return f"include:{top.removesuffix('.data').rpartition('-')[0]}/{below}"  # include/site/pythonX.Y/NAME
    # data files land under the prefix itself, so some meet modules or scripts
    inside = _SITE.fullmatch(below)
    if inside:
        return f"lib:{inside.group(1)}"
    return f"bin:{below.removeprefix('bin/')}" if below.startswith("bin/") else f"data:{below}"


def _scripts(text: str) -> set[str]:
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    try:
        parser.read_string(text)
    except configparser.Error:
        return set()  # pip would refuse it too; the install reports that
    sections = [s for s in ("console_scripts", "gui_scripts") if parser.has_section(s)]
    return {name for section in sections for name in parser[section]}


def install_groups(items: Sequence[HouseFile], most: int) -> list[tuple[HouseFile, ...]]:
    """At most ``most`` groups, path-disjoint between groups, balanced by wheel size, each keeping
    the original order of its wheels."""
    parts = _colliding(items)
    bins: list[list[int]] = [[] for _ in range(max(1, min(most, len(parts))))]
    sizes = [0] * len(bins)
    weighed = [(sum(items[i].path.stat().st_size for i in part), part) for part in parts]
    for size, part in sorted(weighed, key=lambda w: -w[0]):
        smallest = sizes.index(min(sizes))
        bins[smallest] += part
        sizes[smallest] += size
    return [tuple(items[i] for i in sorted(b)) for b in bins if b] or [()]  # no wheels: one empty file, as before


def _colliding(items: Sequence[HouseFile]) -> list[list[int]]:
    """The wheels as sets of indexes that share an installed path (union-find over paths)."""
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for index, item in enumerate(items):
        for path in installed_paths(item.path):
            if path in owner:
                parent[root(index)] = root(owner[path])
            else:
                owner[path] = index
    parts: dict[int, list[int]] = {}
    for index in range(len(items)):
        parts.setdefault(root(index), []).append(index)
    return list(parts.values())
