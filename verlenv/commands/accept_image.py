"""verlenv accept-image: run the acceptance suite inside a profile's built image (build host)."""

from __future__ import annotations

import argparse

from verlenv.accept.image import accept_image
from verlenv.accept.suite import summary
from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.errors import CheckFailed
from verlenv.paths import find_root

NAME = "accept-image"
HELP = (
    "Run `verlenv accept` inside the profile's built image through the Docker engine (GPUs requested when "
    "the host has them, --shm-size 8g, no network) and store the report under <cache>/acceptance/<image-id>.json, "
    "where publish looks for it. Exit 1 when the suite fails."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser, "profile whose image to accept")
    parser.add_argument("--image", default="", help="image reference (default: verlenv/<profile>:<lock sha256[:12]>)")
    parser.add_argument("--gpus", choices=("auto", "all", "none"), default="auto", help="request GPUs (default: auto)")
    add_cache_option(parser)
    parser.add_argument("suite_args", nargs=argparse.REMAINDER, help="after --: arguments for `verlenv accept`")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    name = profile_of(args, paths)
    extra = tuple(a for a in args.suite_args if a != "--")
    report, target = accept_image(paths, name, cache_of(args), image=args.image, gpus=args.gpus, args=extra)
    print(summary(report))
    print(f"report: {target}")
    if not report["passed"]:
        raise CheckFailed(f"acceptance of {name} failed", hint=f"details in {target}")
    return 0
