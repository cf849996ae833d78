"""verlenv venv: a profile's locked environment as a virtual environment, without Docker."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.errors import ConfigError
from verlenv.output import print_json

NAME = "venv"
HELP = (
    "Make DIR a virtual environment holding exactly a profile's verified lock: every wheel installed offline "
    "with --no-index --no-deps --require-hashes, verlenv included, and the manifest images carry written to "
    "DIR/verlenv-manifest.json, so `DIR/bin/verlenv doctor` checks drift as in an image. --reuse-from PYTHON "
    "--reuse PATTERN takes matching distributions (torch, nvidia-*) from another interpreter when it has them "
    "at the locked version, recorded in the manifest as reused. With --bundle, the wheels come from a bundle "
    "made by `verlenv bundle` (its install.py calls this). On failure DIR is removed again."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="DIR", type=Path, help="the venv to make (new or empty)")
    add_profile_option(parser, "profile to install")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venv (default: this one)")
    parser.add_argument("--reuse-from", metavar="PYTHON", help="interpreter whose packages may be reused")
    parser.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="PATTERN",
        help="distribution name or glob to take from --reuse-from at the locked version (repeatable)",
    )
    parser.add_argument(
        "--reuse-any-version",
        action="store_true",
        help="reuse matching distributions even at other versions than the lock's (recorded; doctor warns)",
    )
    parser.add_argument("--bundle", type=Path, metavar="DIR", help="install from this bundle instead of a checkout")
    parser.add_argument("--wheelhouse", type=Path, help=argparse.SUPPRESS)  # the bundle's wheels, reassembled
    add_cache_option(parser)
    parser.add_argument("--offline", action="store_true", help="use only the cache; fail if a file is missing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def execute(args: argparse.Namespace) -> int:
    from verlenv.image.venv import Reuse, make_venv

    if args.bundle:
        return _from_bundle(args)
    from verlenv.image.venv import plan_from_profile
    from verlenv.paths import find_root

    if args.reuse and not args.reuse_from:
        raise ConfigError("--reuse needs --reuse-from PYTHON: the interpreter that has those packages")
    paths = find_root()
    plan = plan_from_profile(paths, profile_of(args, paths), cache_of(args), offline=args.offline, quiet=args.quiet)
    reuse = Reuse(args.reuse_from, tuple(args.reuse), any_version=args.reuse_any_version) if args.reuse_from else None
    return _report(make_venv(plan, args.target, args.python, reuse, args.quiet), args.json)


def _from_bundle(args: argparse.Namespace) -> int:
    from verlenv.image import bundle_install
    from verlenv.image.bundle import expected_on_target, plan_from_bundle
    from verlenv.image.venv import Reuse, make_venv

    expected = expected_on_target(args.bundle)
    # What the bundle left out comes from the interpreter that installs it, unless told otherwise.
    lender = args.reuse_from or (args.python if expected else None)
    reuse = Reuse(lender, tuple(args.reuse), required=expected, any_version=args.reuse_any_version) if lender else None
    if args.wheelhouse:
        return _report(
            make_venv(plan_from_bundle(args.bundle, args.wheelhouse), args.target, args.python, reuse, args.quiet),
            args.json,
        )
    with tempfile.TemporaryDirectory(prefix="verlenv-bundle-") as tmp:
        manifest = bundle_install.read_manifest(args.bundle)
        bundle_install.check_parts(args.bundle, manifest)
        bundle_install.reassemble(args.bundle, manifest, Path(tmp))
        plan = plan_from_bundle(args.bundle, Path(tmp))
        return _report(make_venv(plan, args.target, args.python, reuse, args.quiet), args.json)


def _report(result, as_json: bool) -> int:  # type: ignore[no-untyped-def]
    if as_json:
        print_json(
            {
                "venv": {
                    "path": str(result.path),
                    "python": result.python,
                    "manifest": str(result.manifest),
                    "installed": list(result.installed),
                    "reused": {x.name: {"version": x.version, "site": x.site} for x in result.reused},
                    "seconds": round(result.seconds, 1),
                }
            }
        )
    else:
        print(f"venv      {result.path}\npython    {result.python}\nmanifest  {result.manifest}")
        print(
            f"installed {len(result.installed)} distributions; reused {len(result.reused)}"
            + (": " + ", ".join(f"{x.name} {x.version}" for x in result.reused) if result.reused else "")
        )
        print(f"check it: {result.path}/bin/verlenv doctor")
    return 0
