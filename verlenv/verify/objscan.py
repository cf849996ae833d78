"""Find the shared objects of a wheel or of an installed site-packages, and read their ELF facts.

Only objects that matter to the ABI check get their symbol tables read: torch's own libraries
(the providers) and whatever NEEDs libtorch*/libc10* (the consumers). Everything else is read
for its SONAME and DT_NEEDED entries only, which is what resolving DT_NEEDED requires.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from verlenv.verify.abi import TORCH_LIB, SharedObject
from verlenv.verify.elf import ElfInfo, ElfReadError, is_elf, read_elf

_SO_NAME = re.compile(r"\.so(\.\d+)*$")
# CUDA runtime wheels: hundreds of MB of leaf libraries that never link libtorch.
SKIP_PREFIXES = ("nvidia/", "nvidia_", "cuda/")


@dataclass(frozen=True)
class ObjectError:
    owner: str
    path: str
    error: str


def is_shared_object(path: str) -> bool:
    return bool(_SO_NAME.search(path.rsplit("/", 1)[-1]))


def wants_symbols(path: str, info: ElfInfo) -> bool:
    base = path.rsplit("/", 1)[-1]
    return ("torch/lib/" in path and bool(TORCH_LIB.match(base))) or any(TORCH_LIB.match(n) for n in info.needed)


_LD_SCRIPT = re.compile(rb"^\s*(/\*.*?\*/\s*)*(INPUT|GROUP|OUTPUT_FORMAT|SEARCH_DIR)\s*\(", re.DOTALL)


def is_linker_script(head: bytes) -> bool:
    """A GNU ld script named like a library (glibc's libc.so, the CUDA stub libcuda.so verlenv adds):
    only the link editor reads it, the loader never maps it, so it has no ABI to check."""
    return bool(_LD_SCRIPT.match(head))


def read_object(owner: str, path: str, stream: IO[bytes]) -> SharedObject | ObjectError | None:
    """Dynamic section first; the symbol tables only when the object is a torch provider or consumer.
    None for a linker script."""
    head = stream.read(512)
    stream.seek(0)
    if not is_elf(head[:4]):
        if is_linker_script(head):
            return None
        return ObjectError(owner, path, "not an ELF file (bad magic number)")
    try:
        info = read_elf(stream, symbols=False)
        if wants_symbols(path, info):
            stream.seek(0)
            info = read_elf(stream, symbols=True)
    except ElfReadError as exc:
        return ObjectError(owner, path, str(exc))
    return SharedObject(owner, path, info)


def find_shared_objects(root: Path, tops: Collection[str] | None = None) -> Iterator[tuple[str, str]]:
    """(path relative to root, full path) of every shared object below an installed site-packages
    directory, sorted, symlinks never followed out. ``tops`` limits the walk to those top-level
    entries (the packages a venv reuses from another site)."""
    root = root.resolve()
    top = str(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))  # noqa: PTH114, PTH118
        if tops is not None and dirpath == top:
            dirnames[:] = [d for d in dirnames if d in tops]
            filenames = [f for f in filenames if f in tops]
        rel_dir = dirpath[len(top) + 1 :]
        for filename in sorted(filenames):
            full = os.path.join(dirpath, filename)  # noqa: PTH118
            if is_shared_object(filename) and not os.path.islink(full):  # noqa: PTH114
                yield (f"{rel_dir}/{filename}" if rel_dir else filename), full


def read_file(owner: str, rel: str, full: str) -> SharedObject | ObjectError | None:
    try:
        with open(full, "rb") as stream:  # noqa: PTH123
            return read_object(owner, rel, stream)
    except OSError as exc:
        return ObjectError(owner, rel, f"unreadable: {exc.strerror}")


def scan_site_packages(root: Path, tops: Collection[str] | None = None) -> Iterator[SharedObject | ObjectError]:
    """Every shared object below an installed site-packages directory, read (see find_shared_objects)."""
    for rel, full in find_shared_objects(root, tops):
        item = read_file(rel.split("/", 1)[0], rel, full)
        if item is not None:
            yield item
