"""Read the dynamic-linking facts of one ELF shared object (core: runs inside containers).

pyelftools parses headers and sections; the dynamic symbol table itself is unpacked with
``struct`` in one pass, because libtorch exports hundreds of thousands of symbols and building
a pyelftools object per symbol is an order of magnitude slower. pyelftools is imported when a
file is parsed, not when this module is: doctor imports the types here and must still run, and
report the missing package, in an environment that lost it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import IO, TYPE_CHECKING, Any

from verlenv.errors import require

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile

_STB_LOCAL, _STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 0, 1, 2, 10
_STT_SECTION, _STT_FILE = 3, 4
_SHN_UNDEF = 0
_VERSYM_HIDDEN = 0x8000


class ElfReadError(Exception):
    """The file is not a readable ELF shared object (truncated, garbage, or not ELF at all)."""


@dataclass(frozen=True)
class Undefined:
    name: str
    version: str = ""  # e.g. GLIBC_2.29, GLIBCXX_3.4.30, or "" when unversioned
    library: str = ""  # the verneed file the version belongs to, e.g. libc.so.6
    weak: bool = False


@dataclass(frozen=True)
class ElfInfo:
    soname: str
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    exported: frozenset[str] = field(repr=False)
    undefined: tuple[Undefined, ...] = field(repr=False)
    version_needs: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (library, versions) from .gnu.version_r

    def to_json(self) -> dict[str, Any]:
        return {
            "soname": self.soname,
            "needed": list(self.needed),
            "runpath": list(self.runpath),
            "exported": sorted(self.exported),
            "undefined": [[u.name, u.version, u.library, int(u.weak)] for u in self.undefined],
            "version_needs": [[lib, list(vers)] for lib, vers in self.version_needs],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ElfInfo:
        return cls(
            soname=data["soname"],
            needed=tuple(data["needed"]),
            runpath=tuple(data["runpath"]),
            exported=frozenset(data["exported"]),
            undefined=tuple(Undefined(n, v, lib, bool(w)) for n, v, lib, w in data["undefined"]),
            version_needs=tuple((lib, tuple(v)) for lib, v in data["version_needs"]),
        )


@lru_cache(maxsize=1)
def _pyelftools() -> tuple[type, type[Exception]]:
    """(ELFFile, ELFError); MissingDependency (exit 2) when pyelftools is not installed."""
    elffile = require("elftools.elf.elffile", needed_for="reading ELF files")
    exceptions = require("elftools.common.exceptions", needed_for="reading ELF files")
    return elffile.ELFFile, exceptions.ELFError


def is_elf(head: bytes) -> bool:
    return head[:4] == b"\x7fELF"


def read_elf(stream: IO[bytes], *, symbols: bool = True) -> ElfInfo:
    """Parse ``stream`` (seekable); with ``symbols=False`` only the dynamic section is read."""
    elf_file, elf_error = _pyelftools()
    try:
        return _read(elf_file(stream), symbols)
    except (elf_error, struct.error, ValueError, KeyError, IndexError, AttributeError, UnicodeDecodeError) as exc:
        raise ElfReadError(f"not a readable ELF shared object ({type(exc).__name__}: {exc})") from None


def _read(elf: ELFFile, symbols: bool) -> ElfInfo:
    if elf.header["e_type"] != "ET_DYN":
        raise ElfReadError(f"ELF type {elf.header['e_type']}, not a shared object")
    soname, needed, runpath = _dynamic(elf)
    if not symbols:
        return ElfInfo(soname, needed, runpath, frozenset(), ())
    verneed, needs = _version_needs(elf)
    exported, undefined = _dynsym(elf, verneed)
    return ElfInfo(soname, needed, runpath, exported, undefined, needs)


def _dynamic(elf: ELFFile) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    section = elf.get_section_by_name(".dynamic")
    if section is None:
        return "", (), ()
    soname, needed, runpath = "", [], []
    for tag in section.iter_tags():
        kind = tag.entry.d_tag
        if kind == "DT_NEEDED":
            needed.append(tag.needed)
        elif kind == "DT_SONAME":
            soname = tag.soname
        elif kind in ("DT_RUNPATH", "DT_RPATH"):
            runpath.extend((tag.runpath if kind == "DT_RUNPATH" else tag.rpath).split(":"))
    return soname, tuple(needed), tuple(runpath)


def _version_needs(elf: ELFFile) -> tuple[dict[int, tuple[str, str]], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Map version index -> (version name, library) and list the versions needed per library."""
    section = elf.get_section_by_name(".gnu.version_r")
    by_index: dict[int, tuple[str, str]] = {}
    needs: list[tuple[str, tuple[str, ...]]] = []
    if section is None:
        return by_index, ()
    for verneed, aux_iter in section.iter_versions():
        library = verneed.name
        names = []
        for aux in aux_iter:
            by_index[aux["vna_other"]] = (aux.name, library)
            names.append(aux.name)
        needs.append((library, tuple(names)))
    return by_index, tuple(needs)


def _versym(elf: ELFFile, count: int) -> list[int]:
    section = elf.get_section_by_name(".gnu.version")
    if section is None:
        return [0] * count
    data = section.data()
    fmt = "<" if elf.little_endian else ">"
    return [v & ~_VERSYM_HIDDEN for (v,) in struct.iter_unpack(f"{fmt}H", data[: count * 2])]


def _raw_symbols(elf: ELFFile) -> Iterator[tuple[int, int, int]]:
    """(st_name, st_info, st_shndx) for every .dynsym entry, unpacked in bulk."""
    section = elf.get_section_by_name(".dynsym")
    if section is None:
        return
    fmt = ("<" if elf.little_endian else ">") + ("IBBHQQ" if elf.elfclass == 64 else "IIIBBH")
    data = section.data()
    size = struct.calcsize(fmt)
    for entry in struct.iter_unpack(fmt, data[: len(data) - len(data) % size]):
        if elf.elfclass == 64:
            yield entry[0], entry[1], entry[3]
        else:
            yield entry[0], entry[3], entry[5]


def _dynsym(elf: ELFFile, verneed: dict[int, tuple[str, str]]) -> tuple[frozenset[str], tuple[Undefined, ...]]:
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None:
        return frozenset(), ()
    strtab = elf.get_section(dynsym["sh_link"]).data()
    raw = list(_raw_symbols(elf))
    versions = _versym(elf, len(raw))
    exported: set[str] = set()
    undefined: list[Undefined] = []
    for (name_off, info, shndx), ver in zip(raw, versions, strict=False):
        bind, kind = info >> 4, info & 0xF
        if not name_off or bind == _STB_LOCAL or kind in (_STT_SECTION, _STT_FILE):
            continue
        name = strtab[name_off : strtab.index(b"\0", name_off)].decode()
        if shndx != _SHN_UNDEF:
            exported.add(name)
        else:
            version, library = verneed.get(ver, ("", ""))
            undefined.append(Undefined(name, version, library, weak=bind == _STB_WEAK))
    return frozenset(exported), tuple(undefined)


def version_definitions(stream: IO[bytes]) -> tuple[str, ...]:
    """Symbol versions a library defines (.gnu.version_d), e.g. GLIBC_2.2.5 ... GLIBC_2.36 for libc."""
    elf_file, elf_error = _pyelftools()
    try:
        elf = elf_file(stream)
        section = elf.get_section_by_name(".gnu.version_d")
        if section is None:
            return ()
        return tuple(next(aux_iter).name for _, aux_iter in section.iter_versions())
    except (elf_error, struct.error, ValueError, StopIteration) as exc:
        raise ElfReadError(f"cannot read version definitions ({type(exc).__name__}: {exc})") from None
