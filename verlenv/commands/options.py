"""Options several subcommands share, so their spelling, help and defaults cannot drift apart."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache, default_root


def add_profile_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--profile", metavar="NAME", help=f"{what} (default: the default profile)")


def profile_of(args: argparse.Namespace, paths: ProjectPaths) -> str:
    if args.profile:
        return args.profile
    # here, not at the top: accept-image --rootfs and rootfs run on a GPU node need only the standard library
    from verlenv.profiles.profile import default_profile

    return default_profile(paths)


def add_cache_option(parser: argparse.ArgumentParser, what: str = "cache directory") -> None:
    parser.add_argument("--cache", type=Path, help=f"{what} (default: $VERLENV_CACHE or ~/.cache/verlenv)")


def cache_of(args: argparse.Namespace) -> Cache:
    return Cache(args.cache or default_root())
