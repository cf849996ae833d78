"""verlenv build: the hermetic image build of one profile."""

from __future__ import annotations

import argparse

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.image.build import BuildOptions, build_image, summary
from verlenv.output import print_json
from verlenv.paths import find_root

NAME = "build"
HELP = (
    "Build a profile's image from the verified wheelhouse with no network: base from debootstrap (or a "
    "pinned registry base), wheels installed offline with --require-hashes in layers torch -> engine -> "
    "deps -> verl -> verlenv, OCI + io.verlenv.* labels, manifest.json, and a final self-check "
    "(verlenv clean --check, verlenv doctor --static). Tags only an image that passed. Refuses a stale "
    "lock, a missing or failed verify report, a tampered wheel, an unpinned base."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser, "profile to build")
    parser.add_argument("--allow-unpinned-base", action="store_true", help="accept a registry base without a digest")
    add_cache_option(parser)
    parser.add_argument("--no-cache", action="store_true", help="do not reuse the engine's layer cache")
    parser.add_argument("--tag", action="append", default=[], help="extra tag (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no build log, only the summary (CI)")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    name = profile_of(args, paths)
    options = BuildOptions(
        allow_unpinned_base=args.allow_unpinned_base,
        quiet=args.quiet or args.json,
        nocache=args.no_cache,
        extra_tags=tuple(args.tag),
    )
    result = build_image(paths, name, cache_of(args), options)
    if args.json:
        print_json(
            {
                "build": {
                    "profile": result.profile,
                    "image_id": result.image_id,
                    "tags": list(result.tags),
                    "size": result.size,
                    "timings": result.timings,
                    "labels": result.labels,
                }
            }
        )
    else:
        print(summary(result))
    return 0
