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


def read_object(owner: str, path: str, stream: IO[bytes]) -> SharedObject | ObjectError:
    """Dynamic section first; the symbol tables only when the object is a torch provider or consumer."""
    head = stream.read(4)
    stream.seek(0)
    if not is_elf(head):
        return ObjectError(owner, path, "not an ELF file (bad magic number)")
    try:
        info = read_elf(stream, symbols=False)
        if wants_symbols(path, info):
            stream.seek(0)
            info = read_elf(stream, symbols=True)
    except ElfReadError as exc:
        return ObjectError(owner, path, str(exc))
    return SharedObject(owner, path, info)


def scan_site_packages(root: Path, tops: Collection[str] | None = None) -> Iterator[SharedObject | ObjectError]:
    """Every shared object below an installed site-packages directory, symlinks never followed out.

    ``tops`` limits the walk to those top-level entries (the packages a venv reuses from another site).
    """
    root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not (Path(dirpath) / d).is_symlink())
        if tops is not None and dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d in tops]
            filenames = [f for f in filenames if f in tops]
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        for filename in sorted(filenames):
            rel = f"{rel_dir}/{filename}".lstrip("./") if rel_dir != "." else filename
            full = Path(dirpath) / filename
            if not is_shared_object(filename) or full.is_symlink():
                continue
            try:
                with full.open("rb") as stream:
                    yield read_object(rel.split("/", 1)[0], rel, stream)
            except OSError as exc:
                yield ObjectError(rel.split("/", 1)[0], rel, f"unreadable: {exc.strerror}")
