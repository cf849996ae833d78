"""verlenv base: make a Debian base layer and image from recorded .debs; check the mirror for news."""

from __future__ import annotations

import argparse

from verlenv.errors import CheckFailed
from verlenv.output import print_json
from verlenv.paths import find_root

NAME = "base"
HELP = (
    "Make a base from Debian packages with mmdebstrap (no registry needed). The first run resolves the "
    "packages from the mirror and records every .deb (name, version, sha256) in images/bases.toml; later "
    "runs, on any machine, install exactly those files and must give the recorded layer DiffID. The layer "
    "is loaded into the Docker engine as an image with a config written by verlenv, and the base's shared "
    "libraries and glibc/libstdc++ versions are recorded for `verlenv verify`."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from verlenv.commands.options import add_cache_option

    parser.add_argument("name", help="a debian base from images/bases.toml, e.g. debian12-python3.11")
    parser.add_argument("--mirror", default="", help="Debian mirror URL (default: the one this host's apt uses)")
    parser.add_argument(
        "--update", action="store_true", help="resolve the packages from the mirror again and record the new .debs"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="say whether the mirror has moved on from the recorded .debs (exit 1 if so); changes nothing",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable result")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    add_cache_option(parser)


def execute(args: argparse.Namespace) -> int:
    from verlenv.commands.options import cache_of
    from verlenv.image.base import check_mirror, make_base

    paths = find_root()
    if args.check:
        return _check(check_mirror(paths.bases, args.name, args.mirror), args)
    made = make_base(paths.bases, args.name, cache_of(args), mirror=args.mirror, update=args.update, quiet=args.quiet)
    if args.json:
        print_json(
            {
                "base": {
                    "name": made.name,
                    "reference": made.reference,
                    "image_id": made.image_id,
                    "diff_id": made.layer.diff_id,
                    "resolved": made.resolved,
                    "glibc": made.facts.glibc,
                    "libraries": len(made.facts.libraries),
                }
            }
        )
        return 0
    state = "resolved from the mirror and made" if made.resolved else "made from the recorded .debs"
    print(f"{made.name}: {state}")
    print(f"  layer {made.layer.diff_id} ({made.layer.size / 2**20:.0f} MiB)")
    print(f"  image {made.image_id} ({made.reference})")
    print(f"  glibc {made.facts.glibc}, GLIBCXX {made.facts.glibcxx}, {len(made.facts.libraries)} libraries")
    return 0


def _check(moved: list[str], args: argparse.Namespace) -> int:
    if args.json:
        print_json({"base": args.name, "current": not moved, "moved": moved})
    elif moved:
        print(f"{args.name}: the mirror has moved on from {len(moved)} recorded .deb(s):")
        for line in moved[:40]:
            print(f"  {line}")
    else:
        print(f"{args.name}: every recorded .deb is still the mirror's newest")
    if moved:
        raise CheckFailed(
            f"base {args.name} is behind the mirror ({len(moved)} package(s))",
            hint=f"verlenv base {args.name} --update (new .debs, a new base layer, new image IDs)",
        )
    return 0
