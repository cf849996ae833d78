"""Deal a `verlenv rootfs pack` folder into carry pieces for a host that takes files in calls of a
fixed size (the device tool: 64 MiB a call, the repository included).

    python benchmarks/pieces.py PACK OUT [--mib 58]

OUT/p000, OUT/p001, ... each hold whole files (hard links into PACK) of at most --mib MiB together;
`h200_image.sh stash OUT/pNNN` copies one into the stash there.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def deal(pack: Path, out: Path, limit: int) -> list[list[Path]]:
    """First fit, largest file first: each call of the device tool costs a few seconds however full."""
    files = sorted(pack.iterdir(), key=lambda p: (-p.stat().st_size, p.name))
    pieces: list[list[Path]] = []
    sizes: list[int] = []
    for path in files:
        grows = path.stat().st_size
        if grows > limit:
            raise SystemExit(f"{path} is {grows / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB a piece holds")
        index = next((i for i, used in enumerate(sizes) if used + grows <= limit), len(pieces))
        if index == len(pieces):
            pieces.append([])
            sizes.append(0)
        pieces[index].append(path)
        sizes[index] += grows
    for index, piece in enumerate(pieces):
        folder = out / f"p{index:03d}"
        folder.mkdir(parents=True, exist_ok=False)
        for path in piece:
            os.link(path, folder / path.name)
    return pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--mib", type=int, default=58)
    args = parser.parse_args()
    pieces = deal(args.pack, args.out, args.mib << 20)
    total = sum(p.stat().st_size for piece in pieces for p in piece)
    print(f"{len(pieces)} pieces, {total / 2**20:.0f} MiB in all", file=sys.stderr)


if __name__ == "__main__":
    main()
