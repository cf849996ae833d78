"""A small image made in the test: one real layer tar and a config JSON, the way verlenv assembles images."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MadeImage:
    config: bytes
    layers: tuple[Path, ...]

    @property
    def image_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.config).hexdigest()


def _layer(path: Path, files: dict[str, bytes]) -> str:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def make_image(directory: Path, labels: dict[str, str], payload: bytes = b"verlenv test layer\n") -> MadeImage:
    """Two layers (the second larger than one upload chunk, so streaming is exercised) and a config."""
    directory.mkdir(parents=True, exist_ok=True)
    first, second = directory / "layer0.tar", directory / "layer1.tar"
    diff_ids = [
        _layer(first, {"etc/verlenv-test.txt": payload}),
        _layer(second, {"opt/blob.bin": hashlib.sha256(payload).digest() * 80_000}),
    ]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "2026-09-25T00:00:00Z",
        "config": {"Labels": labels, "Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": "2026-09-25T00:00:00Z", "created_by": "verlenv test"} for _ in diff_ids],
    }
    data = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return MadeImage(data, (first, second))
