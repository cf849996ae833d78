"""verlenv release: the whole chain for one profile, with a summary table of stages."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlenv.commands.options import add_cache_option, add_profile_option, cache_of, profile_of
from verlenv.output import table
from verlenv.paths import find_root
from verlenv.release.chain import run_release, stages

NAME = "release"
HELP = (
    "lock check -> verify -> build -> accept -> publish for one profile, stopping at the first failure with that "
    "stage's exit code, and a table of stages, times and artifacts at the end."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser, "profile to release")
    parser.add_argument("--registry", required=True, metavar="HOST[:PORT]/REPO", help="where to publish")
    parser.add_argument("--catalog", type=Path, help="catalog file (default: images/catalog.json)")
    add_cache_option(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-stage logs")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    name = profile_of(args, paths)
    plan = stages(
        paths,
        name,
        cache_of(args),
        args.registry,
        args.catalog or paths.catalog,
        args.quiet,
    )
    results = run_release(plan)
    print(
        table(
            ["stage", "result", "seconds", "artifact"],
            [
                [r.name, "ok" if r.ok else f"FAILED (exit {r.exit_code})", f"{r.seconds:.1f}", r.artifact[:100]]
                for r in results
            ],
        )
    )
    skipped = [n for n, _ in plan[len(results) :]]
    if skipped:
        print(f"not run: {', '.join(skipped)}")
    failed = next((r for r in results if not r.ok), None)
    return failed.exit_code if failed else 0
