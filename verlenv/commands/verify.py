"""verlenv verify: metadata and ELF ABI verdicts for a profile's locked wheel set."""

from __future__ import annotations

import argparse
import json

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.errors import CheckFailed
from verlenv.output import print_json
from verlenv.paths import find_root
from verlenv.verify import report as verify

NAME = "verify"
HELP = (
    "Download the profile's locked files into the content-addressed cache (hash-checked, parallel, "
    "resumable), check every Requires-Dist against the lock, and check that each extension linking "
    "libtorch finds all its torch symbols, the same C++ ABI, its DT_NEEDED libraries and a new enough "
    "glibc in the base. Writes lockfiles/NAME.verify.json. Exit 1 when anything fails."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser, "profile to verify")
    parser.add_argument("--offline", action="store_true", help="use only the cache; fail if a file is missing")
    add_cache_option(parser)
    parser.add_argument("--jobs", type=int, default=8, help="parallel downloads (default 8)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-write", action="store_true", help="do not write lockfiles/NAME.verify.json")
    parser.add_argument(
        "--check-committed",
        action="store_true",
        help="fail if lockfiles/NAME.verify.json differs from this run's report",
    )
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="what if: check with this release in place of the locked one (e.g. an sgl-kernel built for another "
        "torch); the report is printed, never written (repeatable)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    parser.add_argument("-v", "--verbose", action="store_true", help="list passing extensions too")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    name = profile_of(args, paths)
    report = verify.verify_profile(
        paths, name, cache_of(args), offline=args.offline, quiet=args.quiet, jobs=args.jobs, tries=tuple(args.tries)
    )
    if args.tries:  # a what-if is not the lock's report: never written, never compared
        args.no_write, args.check_committed = True, False
    target = paths.verify_report(name)
    if args.check_committed:
        committed = json.loads(target.read_text()) if target.exists() else None
        if committed != report.to_json():
            raise CheckFailed(
                f"{target} does not match this run's report", hint=f"re-run `verlenv verify --profile {name}`"
            )
    elif not args.no_write:
        verify.write_report(report, target)
    if args.json:
        print_json({"report": report.to_json()})
    else:
        if args.tries:
            print(f"what if: {', '.join(args.tries)} in place of the locked release(s); this report is not written")
        print(verify.render(report, verbose=args.verbose))
        times = ", ".join(f"{k} {v:.1f}s" for k, v in report.timings.items())
        print(f"times: {times}; report: {target if not args.no_write else '(not written)'}")
    return 0 if report.ok else CheckFailed.exit_code
