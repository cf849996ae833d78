"""verlenv bundle: a profile's wheels for another interpreter, as parts of at most N MiB with an installer."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.output import print_json

NAME = "bundle"
HELP = (
    "Write OUT: the wheels a profile's verified lock names for --python (e.g. cp312 wheels at the lock's "
    "versions, each with a locked sha256), verlenv's own wheel, a deterministic tar of them cut into parts of at "
    "most --part-mib MiB, bundle.json with every part's and wheel's sha256, and install.py. On the target, "
    "`python3 OUT/install.py VENV` checks every part, reassembles, re-checks every wheel and makes the venv "
    "(verlenv venv); any mismatch exits 6 and installs nothing. --exclude leaves distributions the target "
    "already has (torch, nvidia-*) out; installing then reuses them at the locked version or refuses."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", type=Path, help="the bundle directory to write (must not exist)")
    add_profile_option(parser, "profile to bundle")
    parser.add_argument("--python", required=True, metavar="X.Y", help="the target interpreter's Python version")
    parser.add_argument("--part-mib", type=int, default=58, help="largest part in MiB (default 58)")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave out distributions the target already has, e.g. 'torch' or 'nvidia-*' (repeatable)",
    )
    parser.add_argument(
        "--omit",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave out distributions nobody will have (a venv then goes without them; the manifest says so, "
        "and doctor reports requirements on them as warnings)",
    )
    add_cache_option(parser)
    parser.add_argument("--offline", action="store_true", help="use only the cache; fail if a file is missing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def execute(args: argparse.Namespace) -> int:
    from verlenv.image.bundle import make_bundle
    from verlenv.paths import find_root

    paths = find_root()
    name = profile_of(args, paths)
    made = make_bundle(
        paths,
        name,
        cache_of(args),
        args.out,
        python=args.python,
        part_mib=args.part_mib,
        exclude=tuple(args.exclude),
        omit=tuple(args.omit),
        offline=args.offline,
        quiet=args.quiet,
    )
    if args.json:
        print_json(
            {
                "bundle": {
                    "path": str(made.path),
                    "python": made.python,
                    "wheels": made.wheels,
                    "bytes": made.size,
                    "parts": list(made.parts),
                    "expected_on_target": made.excluded,
                    "omitted": made.omitted,
                }
            }
        )
    else:
        print(f"bundle    {made.path} ({made.wheels} wheels for Python {made.python}, {made.size / 2**20:.0f} MiB)")
        print(f"parts     {len(made.parts)} in {made.path}/parts")
        if made.excluded:
            print(f"expected  on the target: {', '.join(f'{n} {v}' for n, v in sorted(made.excluded.items()))}")
        if made.omitted:
            print(f"omitted   {', '.join(f'{n} {v}' for n, v in sorted(made.omitted.items()))}")
        print(f"install   python{made.python} {made.path}/install.py VENV")
    return 0
