"""verlenv publish: push an accepted image by digest and record it in images/catalog.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.output import print_json
from verlenv.paths import find_root
from verlenv.release.publish import Destination, publish

NAME = "publish"
HELP = (
    "Push a profile's image only if a passing acceptance report names this exact image ID and the digest of its "
    "per-file manifest (a GPU run for GPU profiles). The layers verlenv wrote are pushed as they are, over the "
    "registry's HTTP API (no Docker engine; deterministic gzip, so the manifest digest is reproducible): "
    "immutable tag PROFILE-LOCKSHA and moving tag PROFILE, digest read back, the report attached as tag "
    "sha256-<digest>.acceptance, then images/catalog.json updated atomically. Credentials: "
    "VERLENV_REGISTRY_USERNAME/PASSWORD, else Docker's config.json and credential helpers; never printed."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser, "profile to publish")
    parser.add_argument("--registry", required=True, metavar="HOST[:PORT]/REPO", help="where to push")
    parser.add_argument("--image", default="", help="image ID (default: the one in lockfiles/NAME.image.json)")
    parser.add_argument(
        "--report",
        type=Path,
        help="an acceptance report made elsewhere (accept-image --rootfs --report-out on a GPU host)",
    )
    parser.add_argument("--ca-cert", type=Path, help="CA certificate for the registry's TLS")
    parser.add_argument("--insecure", action="store_true", help="plain HTTP to the registry (loopback only by default)")
    parser.add_argument("--catalog", type=Path, help="catalog file (default: images/catalog.json)")
    add_cache_option(parser, "where acceptance reports are")
    parser.add_argument("--json", action="store_true", help="print the catalog entry as JSON")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    name = profile_of(args, paths)
    target = args.catalog or paths.catalog
    where = Destination(args.registry, args.ca_cert, args.insecure)
    done = publish(paths, name, cache_of(args), where, target, args.image, args.report)
    if args.json:
        print_json({"published": done.entry.__dict__})
    else:
        print(f"published {name}\n  digest      {done.entry.by_digest}")
        for tag in done.entry.tags:
            print(f"  tag         {tag}")
        print(f"  acceptance  {done.entry.repository}:{done.entry.attachment}\n  catalog     {done.catalog_path}")
    return 0
