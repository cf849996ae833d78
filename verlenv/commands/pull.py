"""verlenv pull: verify a published image over HTTP before anyone trains on it; optionally fetch it."""

from __future__ import annotations

import argparse

from verlenv.output import print_json
from verlenv.release.pull import TOOLS, Pulled, pull, run_tool

NAME = "pull"
HELP = (
    "Resolve a profile name or tag through the catalog and verify it over the registry's HTTP API, with no "
    "Docker engine: the manifest by digest (re-hashed), the config blob (its sha256 is the image ID), the "
    "io.verlenv.* labels against the catalog, and the attached acceptance report (must pass, for this image "
    "ID). Then print the enroot and apptainer commands for that digest, or run one with --run. Any mismatch "
    "exits non-zero and nothing is run or pulled. Credentials: VERLENV_REGISTRY_USERNAME/PASSWORD, else "
    "Docker's config.json (credential helpers included). https always, except a loopback registry without TLS "
    "or --insecure."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME|TAG", help="profile name or published tag")
    parser.add_argument("--catalog", default="images/catalog.json", metavar="PATH|URL", help="catalog to resolve in")
    parser.add_argument(
        "--ca-cert",
        metavar="PATH",
        help="CA bundle for the registry's https (default: $VERLENV_REGISTRY_CA, /etc/docker/certs.d/HOST/ca.crt, "
        "then the system store)",
    )
    parser.add_argument("--insecure", action="store_true", help="talk plain HTTP to the registry (any host)")
    parser.add_argument("--run", choices=TOOLS, help="after every check passed, run this tool's command")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument(
        "--engine", action="store_true", help="also pull through the Docker engine (started if needed) and compare"
    )
    engine.add_argument("--docker", action="store_true", help="also pull through Docker, if an engine answers")
    # the spellings before --run, kept working for scripts
    parser.add_argument("--apptainer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--enroot", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="machine-readable result")


def execute(args: argparse.Namespace) -> int:
    pulled = pull(
        args.name, args.catalog, engine=args.engine, docker=args.docker, ca_cert=args.ca_cert, insecure=args.insecure
    )
    if args.json:
        print_json({"pulled": _summary(pulled)})
    else:
        _report(pulled)
    for tool in _tools_to_run(args):
        run_tool(pulled.command(tool))
    return 0


def _tools_to_run(args: argparse.Namespace) -> list[str]:
    chosen = [args.run] if args.run else []
    return chosen + [tool for tool in TOOLS if getattr(args, tool) and tool not in chosen]


def _summary(pulled: Pulled) -> dict[str, object]:
    return {
        "reference": pulled.entry.by_digest,
        "image_id": pulled.image_id,
        "lock_sha256": pulled.entry.lock_sha256,
        "registry": pulled.endpoint.describe() if pulled.endpoint else "",
        "engine_pulled": pulled.engine_pulled,
        "apptainer": pulled.apptainer,
        "enroot": pulled.enroot,
        "acceptance_passed": pulled.acceptance["passed"],
    }


def _report(pulled: Pulled) -> None:
    device = pulled.acceptance.get("host", {}).get("device", "?")
    print(
        f"verified {pulled.entry.by_digest}\n"
        f"  registry    {pulled.endpoint.describe() if pulled.endpoint else '?'}\n"
        f"  image id    {pulled.image_id}\n"
        f"  labels      match the catalog (lock {pulled.entry.lock_sha256[:12]})\n"
        f"  acceptance  passed ({device})"
    )
    if pulled.engine_pulled:
        print("  docker      pulled; the engine's image ID matches")
    print(f"\nfor Slurm clusters:\n  {pulled.enroot}\n  {pulled.apptainer}")
