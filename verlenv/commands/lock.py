"""verlenv lock: resolve profiles into hashed locks, or check them for staleness offline."""

from __future__ import annotations

import argparse

from verlenv.errors import CheckFailed, ConfigError
from verlenv.lock import backends
from verlenv.lock import resolve as lock
from verlenv.output import print_json, table
from verlenv.paths import find_root
from verlenv.profiles.profile import default_profile, load_profile, profile_names

NAME = "lock"
HELP = (
    "Resolve a profile with uv into lockfiles/NAME.lock (every file hashed, for the profile's "
    "platform and Python, as of its snapshot date). With --build-backends: lock the PEP 517 backends "
    "that build the locked sdists (images/build-backends.toml -> lockfiles/build-backends.lock). "
    "With --check: say offline which locks are stale against what they are made from (exit 1 if any)."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile", action="append", metavar="NAME", help="profile to lock (repeatable); default: the default profile"
    )
    parser.add_argument("--all", action="store_true", help="every profile in images/profiles/")
    parser.add_argument(
        "--check", action="store_true", help="do not resolve; report stale or missing locks (no network)"
    )
    parser.add_argument(
        "--build-backends",
        action="store_true",
        help="lock the sdists' build backends (setuptools, wheel) into lockfiles/build-backends.lock",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output (with --check)")


def _selected(args: argparse.Namespace, paths) -> list[str]:  # type: ignore[no-untyped-def]
    if args.all and args.profile:
        raise ConfigError("give --profile or --all, not both")
    if args.all or (args.check and not args.profile):
        return profile_names(paths)
    return args.profile or [default_profile(paths)]


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    if args.build_backends and not args.check:
        if args.profile or args.all:
            raise ConfigError("--build-backends locks the backends only; run --profile/--all separately")
        backends.resolve(paths)
        return 0
    names = _selected(args, paths)
    if args.check:
        return _check(paths, names, as_json=args.json)
    for name in names:
        lock.resolve(load_profile(paths, name), paths)
    return 0


def _check(paths, names: list[str], *, as_json: bool) -> int:  # type: ignore[no-untyped-def]
    statuses = lock.check(paths, names)
    if backends.source(paths).exists():  # every sdist build needs it, whichever profile it is for
        statuses.append(lock.LockStatus(backends.NAME, *backends.state(paths)))
    if as_json:
        print_json({"locks": [{"profile": s.profile, "state": s.state, "reason": s.reason} for s in statuses]})
    else:
        print(table(["profile", "lock", "detail"], [[s.profile, s.state, s.reason] for s in statuses]))
    bad = [s.profile for s in statuses if not s.ok]
    if bad:
        if not as_json:
            raise CheckFailed(
                f"{len(bad)} lock(s) not fresh: {', '.join(bad)}",
                hint="re-run `verlenv lock --profile NAME` (`verlenv lock --build-backends` for build-backends)",
            )
        return CheckFailed.exit_code
    return 0
