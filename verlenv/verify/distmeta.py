"""Core metadata (name, version, Requires-Dist, Requires-Python) of wheels, sdists and installs."""

from __future__ import annotations

import json
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from verlenv import atomic
from verlenv.errors import ConfigError


@dataclass(frozen=True)
class DistMeta:
    name: str
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str = ""
    dynamic_requires: bool = False  # an sdist whose PKG-INFO does not list its requirements

    @classmethod
    def parse(cls, text: str, *, sdist: bool = False) -> DistMeta:
        msg = HeaderParser().parsestr(text)
        dynamic = [d.lower() for d in msg.get_all("Dynamic") or []]
        old_sdist = sdist and msg.get("Metadata-Version", "1.0") < "2.2"
        return cls(
            name=canonicalize_name(msg["Name"] or ""),
            version=msg["Version"] or "",
            requires_dist=tuple(msg.get_all("Requires-Dist") or ()),
            requires_python=msg.get("Requires-Python") or "",
            dynamic_requires=sdist and ("requires-dist" in dynamic or old_sdist),
        )


def read_wheel_meta(path: Path) -> DistMeta:
    try:
        with zipfile.ZipFile(path) as archive:
            member = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
            return DistMeta.parse(archive.read(member).decode("utf-8", "replace"))
    except (zipfile.BadZipFile, StopIteration, OSError) as exc:
        raise ConfigError(f"{path.name}: cannot read its METADATA ({type(exc).__name__})") from None


def read_sdist_meta(path: Path) -> DistMeta:
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                member = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/PKG-INFO"))
                return DistMeta.parse(archive.read(member).decode("utf-8", "replace"), sdist=True)
        with tarfile.open(path) as archive:
            info = next(m for m in archive.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
            handle = archive.extractfile(info)
            assert handle is not None
            return DistMeta.parse(handle.read().decode("utf-8", "replace"), sdist=True)
    except (tarfile.TarError, zipfile.BadZipFile, StopIteration, OSError, AssertionError) as exc:
        raise ConfigError(f"{path.name}: cannot read its PKG-INFO ({type(exc).__name__})") from None


def read_meta(path: Path) -> DistMeta:
    return read_wheel_meta(path) if path.name.endswith(".whl") else read_sdist_meta(path)


def read_meta_kept(path: Path, kept: Path) -> DistMeta:
    """read_meta of a stored file, kept in ``kept`` (the cache's place for its sha256: what one sha256
    names never changes); opening every wheel's zip directory again (torch's alone has thousands of
    entries) was about a second of each rebuild."""
    try:
        data = json.loads(kept.read_text())
        return DistMeta(**{**data, "requires_dist": tuple(data["requires_dist"])})
    except (OSError, ValueError, TypeError, KeyError):
        pass
    meta = read_meta(path)
    atomic.write_text(kept, json.dumps(asdict(meta)))
    return meta


def exact_pin(requires: Iterable[str], name: str = "torch") -> str:
    """The version an unconditional ``name==X`` in ``requires`` pins, or '' (used for fix hints)."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if canonicalize_name(req.name) == name and len(exact) == 1 and req.marker is None:
            return exact[0]
    return ""


def extra_pin(requires: Iterable[str], extra: str, name: str) -> str:
    """The version ``name==X`` that a distribution's [extra] pins (verl's [sglang] -> sglang==0.5.12), or ''."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != name or req.marker is None:
            continue
        if req.marker.evaluate({"extra": extra}) and not req.marker.evaluate({"extra": ""}):
            exact = [s.version for s in req.specifier if s.operator == "=="]
            if len(exact) == 1:
                return exact[0]
    return ""
