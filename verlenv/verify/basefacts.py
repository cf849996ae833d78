"""What a root filesystem provides (shared libraries, glibc / libstdc++ versions), read off its files."""

from __future__ import annotations

import re
from pathlib import Path

from verlenv.profiles.bases import BaseFacts
from verlenv.verify.elf import ElfReadError, version_definitions

LIB_DIRS = (
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib64",
    "lib",
    "usr/lib",
    "usr/lib64",
    "lib/aarch64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
)
_SO = re.compile(r"\.so(\.\d+)*$")


def _newest(versions: tuple[str, ...], prefix: str) -> str:
    numbered = [v[len(prefix) :] for v in versions if v.startswith(prefix) and v[len(prefix) :][:1].isdigit()]
    return max(numbered, key=lambda v: tuple(int(x) for x in v.split("."))) if numbered else ""


def _defs(path: Path) -> tuple[str, ...]:
    if not path.exists():
        return ()
    try:
        with path.open("rb") as stream:
            return version_definitions(stream)
    except ElfReadError:
        return ()


def rootfs_facts(root: Path) -> BaseFacts:
    names: set[str] = set()
    found: dict[str, Path] = {}
    for rel in LIB_DIRS:
        folder = root / rel
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in folder.iterdir():
            if _SO.search(entry.name):
                names.add(entry.name)
                found.setdefault(entry.name, entry)
    libc = _resolve(root, found.get("libc.so.6"))
    libstdcxx = _resolve(root, found.get("libstdc++.so.6"))
    return BaseFacts(
        libraries=frozenset(names),
        glibc=_newest(_defs(libc), "GLIBC_") if libc else "",
        glibcxx=_newest(_defs(libstdcxx), "GLIBCXX_") if libstdcxx else "",
    )


def _resolve(root: Path, path: Path | None) -> Path | None:
    """Follow a symlink inside ``root`` (an absolute target is taken relative to the rootfs)."""
    for _ in range(10):
        if path is None or not path.is_symlink():
            return path
        target = Path(path.readlink())
        path = root / target.relative_to("/") if target.is_absolute() else path.parent / target
    return None
