"""nvcc's process ID zeroed in object files, one of the two things that make two compiles of one CUDA source differ.

nvcc hands gcc its host code as `tmpxft_<nvcc's PID, 8 hex digits>_00000000-6_<src>.cudafe1.cpp`, and
gcc writes that name into the object's symbol table (the STT_FILE symbol and
`_GLOBAL__sub_I_tmpxft_…`). Two compiles of a small kernel differ in those bytes only. Zeroing
the PID field keeps every length and offset, and a link of equal objects is equal. cudafe++ also writes
its own PID, in decimal, into internal-linkage names (`…_cu_57d06cbc_<pid>…`): a length that varies, so it
is not rewritten here but fixed before the compile, by the preloaded getpid in pidpin.c.

This file runs on its own (standard library only): the build recipe hands its text to the build
environment's Python, in a container here or in the image's tree on another host.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_")
FIXED = b"tmpxft_00000000_"


def normalize(path: Path) -> bool:
    """Zero nvcc's PID in ``path``; True when the file changed. Written aside and renamed, so a killed
    run never leaves a truncated object. The mtime is kept: ninja compiles again any output whose mtime
    is not the one its log recorded (flash-attn: all 72 kernels, found on 2026-12-05)."""
    data = path.read_bytes()
    fixed = TEMP_NAME.sub(FIXED, data)
    if fixed == data:
        return False
    stat = path.stat()
    staged = path.with_name(f".{path.name}.objnorm")
    staged.write_bytes(fixed)
    staged.chmod(stat.st_mode & 0o7777)
    os.utime(staged, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    staged.replace(path)
    return True


def normalize_tree(root: Path) -> tuple[int, int]:
    """(objects under ``root``, how many changed)."""
    objects = sorted(root.rglob("*.o"))
    return len(objects), sum(normalize(path) for path in objects)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: objnorm.py BUILD-FOLDER (the folder holding the compiled .o files)", file=sys.stderr)
        return 2
    total, changed = normalize_tree(Path(argv[0]))
    print(f"[objnorm] {changed} of {total} object file(s) had nvcc's temp-file PID zeroed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
