"""How a rootfs pack's tar groups are compressed, and read back on the target.

xz at its default preset ran at ~5 MB/s on the 2-core build host with flash-attn compiling beside it:
a default image's pack took 27 min. zstd -3 gave nearly xz's size (32 % of 300 MB of vLLM's .so files
against xz -1's 30 %) in 1 s instead of 55 s, and gzip -1 (45 %) in 5.5 s (2026-12-06). So zstd is the
default; gzip needs nothing but Python on the target.

Standard library only, like `rootfs apply`: zstd goes through the `zstd` program, or Python's
`zstandard` module where a host has that instead.
"""

from __future__ import annotations

import gzip
import lzma
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

CODECS = ("zstd", "gzip", "xz")
LEVELS = {"zstd": range(1, 20), "gzip": range(1, 10), "xz": range(0, 10)}
DEFAULT_LEVEL = {"zstd": 3, "gzip": 1, "xz": 1}
SUFFIX = {"zstd": "zst", "gzip": "gz", "xz": "xz"}
CHUNK = 1 << 20


class CodecError(Exception):
    """The codec cannot be used on this host; the message says what to install or how to pack instead."""


def check_level(codec: str, level: int) -> None:
    if codec not in CODECS:
        raise CodecError(f"unknown codec {codec!r}: use one of {', '.join(CODECS)}")
    if level not in LEVELS[codec]:
        span = LEVELS[codec]
        raise CodecError(f"{codec} level {level} is out of range: {span.start}-{span.stop - 1}")


def check_readable(codec: str) -> None:
    """Raise before anything is unpacked when this host cannot decompress ``codec``."""
    if codec == "zstd" and not shutil.which("zstd") and not _zstandard():
        raise CodecError(
            "the pack's parts are zstd-compressed, and this host has neither the zstd program nor Python's "
            "zstandard module: install one (apt-get install zstd, dnf install zstd, pip install zstandard), "
            "or pack again with --codec gzip, which needs only Python"
        )


@contextmanager
def writer(codec: str, target: Path, level: int) -> Iterator[IO[bytes]]:
    """A binary sink whose bytes land compressed in ``target``; the same input gives the same bytes."""
    check_level(codec, level)
    if codec == "gzip":
        with target.open("wb") as raw, gzip.GzipFile("", "wb", level, raw, mtime=0) as sink:
            yield sink  # type: ignore[misc]
        return
    program = {"zstd": ["zstd", "-T0", f"-{level}", "-q", "-c"], "xz": ["xz", "-T0", f"-{level}", "-c"]}[codec]
    if shutil.which(program[0]):
        with target.open("wb") as raw:
            proc = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=raw)
        assert proc.stdin is not None
        try:
            yield proc.stdin
        finally:
            proc.stdin.close()
            if proc.wait() != 0:
                raise CodecError(f"{program[0]} failed writing {target} (exit {proc.returncode})")
        return
    with target.open("wb") as raw, _module_writer(codec, raw, level) as sink:
        yield sink


@contextmanager
def _module_writer(codec: str, raw: IO[bytes], level: int) -> Iterator[IO[bytes]]:
    if codec == "xz":
        with lzma.LZMAFile(raw, "wb", preset=level) as sink:
            yield sink  # type: ignore[misc]
        return
    zstandard = _zstandard()
    if zstandard is None:
        raise CodecError("packing with zstd needs the zstd program or Python's zstandard module; or use --codec xz")
    with zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False) as sink:
        yield sink


@contextmanager
def reader(codec: str, parts: Sequence[Path]) -> Iterator[IO[bytes]]:
    """The decompressed stream of ``parts`` read back to back (a group is cut at any byte)."""
    if codec == "zstd" and shutil.which("zstd"):
        with _program_reader(["zstd", "-dcq"], parts) as stream:
            yield stream
        return
    joined = _Joined(list(parts))
    try:
        if codec == "zstd":
            zstandard = _zstandard()
            if zstandard is None:
                check_readable(codec)
            with zstandard.ZstdDecompressor().stream_reader(joined) as stream:  # type: ignore[union-attr]
                yield stream
        else:
            opener = lzma.open if codec == "xz" else gzip.open
            with opener(joined, "rb") as stream:  # type: ignore[operator]
                yield stream
    finally:
        joined.close()


@contextmanager
def _program_reader(program: list[str], parts: Sequence[Path]) -> Iterator[IO[bytes]]:
    proc = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    feeder = threading.Thread(target=_feed, args=(parts, proc.stdin), daemon=True)
    feeder.start()
    try:
        yield proc.stdout
    finally:
        proc.stdout.close()
        feeder.join()
        if proc.wait() not in (0, -13):  # -13: stopped reading early (SIGPIPE), an error is raised already
            raise CodecError(f"{program[0]} could not decompress {parts[0].name}… (exit {proc.returncode})")


def _feed(parts: Sequence[Path], sink: IO[bytes]) -> None:
    with suppress(BrokenPipeError):  # the reader stopped early: it raises its own error
        try:
            for part in parts:
                with part.open("rb") as handle:
                    shutil.copyfileobj(handle, sink, CHUNK)
        finally:
            sink.close()


class _Joined:
    """The parts of one group read back as one binary file."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths, self.handle = paths, None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunks = []
        while size != 0:
            if self.handle is None:
                if not self.paths:
                    break
                self.handle = self.paths.pop(0).open("rb")
            data = self.handle.read(size)
            if not data:
                self.handle.close()
                self.handle = None
                continue
            chunks.append(data)
            size = size - len(data) if size > 0 else size
        return b"".join(chunks)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def _zstandard():  # type: ignore[no-untyped-def]
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        return None
    return zstandard
