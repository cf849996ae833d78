"""Stream one member out of a zip (wheel) as fast as this machine can inflate it.

Inflating libtorch_cuda.so (≈0.9 GB) dominates a cold verify, so this reads the raw deflate
stream itself and uses ISA-L (the `isal` package of verlenv[build]) when present, about twice
zlib's speed. No CRC check: the whole wheel's sha256 was verified before it got here.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

try:
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the core install has no isal
    import zlib as _zlib  # type: ignore[no-redef]

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
CHUNK = 4 << 20


def member_chunks(wheel: Path, info: zipfile.ZipInfo) -> Iterator[bytes]:
    with wheel.open("rb") as handle:
        handle.seek(info.header_offset)
        header = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
        if header[0] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"{info.filename}: bad local header")
        handle.seek(header[10] + header[11], 1)  # file name and extra field lengths
        yield from _payload(handle, info)


def _payload(handle: IO[bytes], info: zipfile.ZipInfo) -> Iterator[bytes]:
    left = info.compress_size
    if info.compress_type == zipfile.ZIP_STORED:
        while left:
            chunk = handle.read(min(left, CHUNK))
            left -= len(chunk)
            yield chunk
        return
    if info.compress_type != zipfile.ZIP_DEFLATED:
        raise zipfile.BadZipFile(f"{info.filename}: compression type {info.compress_type} is not supported")
    inflater = _zlib.decompressobj(-15)
    while left:
        chunk = handle.read(min(left, CHUNK))
        if not chunk:
            raise zipfile.BadZipFile(f"{info.filename}: truncated")
        left -= len(chunk)
        yield inflater.decompress(chunk)
    yield inflater.flush()
