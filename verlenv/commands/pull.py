"""verlenv pull: fetch a published image by digest and verify it before anyone trains on it."""

from __future__ import annotations

import argparse

from verlenv.output import print_json
from verlenv.release.pull import pull, run_tool

NAME = "pull"
HELP = (
    "Resolve a profile name or tag through the catalog, pull by digest, check the image ID, the labels (lock "
    "sha256, component versions) and the attached acceptance report, then print the apptainer and enroot "
    "commands for that digest (and run them with --apptainer / --enroot). Refuses on any mismatch."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME|TAG", help="profile name or published tag")
    parser.add_argument("--catalog", default="images/catalog.json", metavar="PATH|URL", help="catalog to resolve in")
    parser.add_argument("--apptainer", action="store_true", help="also run the apptainer pull")
    parser.add_argument("--enroot", action="store_true", help="also run the enroot import")
    parser.add_argument("--json", action="store_true", help="machine-readable result")


def execute(args: argparse.Namespace) -> int:
    pulled = pull(args.name, args.catalog)
    if args.json:
        print_json(
            {
                "pulled": {
                    "reference": pulled.entry.by_digest,
                    "image_id": pulled.image_id,
                    "lock_sha256": pulled.entry.lock_sha256,
                    "apptainer": pulled.apptainer,
                    "enroot": pulled.enroot,
                    "acceptance_passed": pulled.acceptance["passed"],
                }
            }
        )
    else:
        print(
            f"pulled {pulled.entry.by_digest}\n  image id    {pulled.image_id}\n  labels      match the catalog "
            f"(lock {pulled.entry.lock_sha256[:12]})\n  acceptance  passed ({pulled.acceptance['host'].get('device')})"
        )
        print(f"\nfor Slurm clusters:\n  {pulled.apptainer}\n  {pulled.enroot}")
    if args.apptainer:
        run_tool(pulled.apptainer)
    if args.enroot:
        run_tool(pulled.enroot)
    return 0
