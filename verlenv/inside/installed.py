"""Installed distributions of a site-packages, read once and fast (core; doctor, clean, envcheck).

importlib.metadata re-parses METADATA with the email package on every attribute access, which
costs seconds over a few hundred distributions; this reads each header block once.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Installed:
    name: str  # canonical
    version: str
    requires: tuple[str, ...]
    path: Path  # the *.dist-info directory
    files: frozenset[str]  # RECORD paths relative to site-packages, normalised
    hashes: tuple[tuple[str, str], ...]  # (path, urlsafe-b64 sha256) from RECORD

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


def _headers(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    last = ""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line in ("\n", "\r\n"):
                    break
                if line[:1] in (" ", "\t") and last:
                    found[last][-1] += " " + line.strip()
                    continue
                key, _, value = line.partition(":")
                last = key.strip().lower()
                found.setdefault(last, []).append(value.strip())
    except OSError:
        pass
    return found


def _record(site: Path, folder: Path) -> tuple[frozenset[str], tuple[tuple[str, str], ...]]:
    files: set[str] = set()
    hashes: list[tuple[str, str]] = []
    record = folder / "RECORD"
    if not record.exists():
        return frozenset(), ()
    with record.open(newline="", encoding="utf-8", errors="replace") as handle:
        for row in csv.reader(handle):
            if not row:
                continue
            rel = os.path.normpath(row[0]).replace(os.sep, "/")
            files.add(rel)
            if len(row) > 1 and row[1].startswith("sha256="):
                hashes.append((rel, row[1][7:]))
    return frozenset(files), tuple(hashes)


def read_installed(site: Path) -> list[Installed]:
    """Every *.dist-info in ``site``, duplicates included, in a stable order."""
    return list(_read_installed(site.resolve()))


@lru_cache(maxsize=8)
def _read_installed(site: Path) -> tuple[Installed, ...]:
    found = []
    for folder in sorted(site.glob("*.dist-info")):
        headers = _headers(folder / "METADATA")
        name = (headers.get("name") or [folder.name.split("-")[0]])[0]
        files, hashes = _record(site, folder)
        found.append(
            Installed(
                canonicalize_name(name),
                (headers.get("version") or [""])[0],
                tuple(headers.get("requires-dist", ())),
                folder,
                files,
                hashes,
            )
        )
    return tuple(found)


def forget(site: Path) -> None:
    """Drop the cached reading (after something was installed or removed)."""
    _read_installed.cache_clear()


def by_name(site: Path) -> dict[str, Installed]:
    """name -> distribution; with duplicates, the last dist-info in sorted order wins."""
    return {d.name: d for d in read_installed(site)}


def with_lent(site: Path, lent: Mapping[str, Path]) -> dict[str, Installed]:
    """by_name(site) plus the distributions a venv reuses from other site-packages (name -> that site)."""
    dists = by_name(site)
    for name, where in lent.items():
        found = by_name(where).get(name)
        if found is not None:
            dists.setdefault(name, found)
    return dists


def top_levels(dists: Iterable[Installed]) -> dict[str, Installed]:
    """Top-level directory of site-packages -> the first distribution whose RECORD puts files in it."""
    owners: dict[str, Installed] = {}
    for dist in dists:
        for rel in dist.files:
            top = rel.split("/", 1)[0]
            if "/" in rel and not top.endswith((".dist-info", ".data")) and top not in ("..", "__pycache__"):
                owners.setdefault(top, dist)
    return owners
