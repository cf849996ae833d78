"""verlenv build: the hermetic image build of one profile."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.image.build import BuildOptions, build_image, summary
from verlenv.output import print_json
from verlenv.paths import find_root

NAME = "build"
HELP = (
    "Build a profile's image, bit for bit reproducibly, from the verified wheelhouse with no network: the "
    "Debian base from its recorded .debs, each layer's wheels installed offline with --require-hashes "
    "(torch -> torch-extras -> engine -> deps -> verl -> verlenv) and written as a normalized tar, a config "
    "written by verlenv (OCI + io.verlenv.* labels), manifest.json, and a self-check in the image (verlenv "
    "clean --check, verlenv doctor --static) whose ELF record becomes the last layer. The image ID must equal "
    "lockfiles/NAME.image.json's when the inputs are the same (and --expect's when given); a build that differs "
    "fails with the layers and paths that differ. Tags only an image that passed. Refuses a stale lock, a "
    "missing or failed verify report, a tampered wheel."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser, "profile to build")
    parser.add_argument("--allow-unpinned-base", action="store_true", help="accept a registry base without a digest")
    add_cache_option(parser)
    parser.add_argument("--no-cache", action="store_true", help="install every layer again instead of reusing it")
    parser.add_argument(
        "--expect",
        default="",
        metavar="sha256:HEX",
        help="the image ID the build must give (e.g. a published image's, to re-derive it); exit 6 otherwise",
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="do not write lockfiles/NAME.image.json when the inputs changed (it is still checked)",
    )
    parser.add_argument(
        "--ext-wheel",
        action="append",
        default=[],
        type=Path,
        metavar="WHEEL",
        help="a wheel of a declared extension (flash-attn) built elsewhere from this profile's recipe, e.g. "
        "in the image's tree on a GPU host with more cores (benchmarks/h200_image.sh extbuild); it must match "
        "lockfiles/NAME.builds.json's record for these inputs (exit 6 otherwise, naming the files that differ), "
        "or is recorded where there is none, and is then used instead of compiling (repeatable)",
    )
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
        expect=args.expect,
        record=not args.no_record,
        ext_wheels=tuple(args.ext_wheel),
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
                    "diff_ids": list(result.diff_ids),
                    "files_sha256": result.files_sha256,
                    "record": result.record,
                }
            }
        )
    else:
        print(summary(result))
    return 0
