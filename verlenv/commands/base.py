"""verlenv base: make a debootstrap base image and record what it provides in images/bases.toml."""

from __future__ import annotations

import argparse

from verlenv.image.base import make_base
from verlenv.output import print_json
from verlenv.paths import find_root

NAME = "base"
HELP = (
    "Make a base image from Debian packages with debootstrap (no registry needed), import it into "
    "the Docker engine tagged with the hash of its recipe, and record its shared libraries and "
    "glibc/libstdc++ versions in images/bases.toml. Reuses the image when the recipe is unchanged."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="a debootstrap base from images/bases.toml, e.g. debian12-python3.11")
    parser.add_argument("--mirror", default="", help="Debian mirror URL (default: the one this host's apt uses)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    parser.add_argument("--json", action="store_true", help="machine-readable result")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    made = make_base(paths.bases, args.name, mirror=args.mirror, force=args.force, quiet=args.quiet)
    if args.json:
        print_json(
            {"base": {"name": made.name, "reference": made.reference, "image_id": made.image_id, "reused": made.reused}}
        )
    else:
        state = "reused" if made.reused else "made"
        print(f"{made.name}: {state} {made.reference} ({made.image_id[:19]})")
        if made.facts:
            print(
                f"  glibc {made.facts.glibc}, GLIBCXX {made.facts.glibcxx}, {len(made.facts.libraries)} libraries "
                "recorded in images/bases.toml"
            )
    return 0
