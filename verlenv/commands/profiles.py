"""verlenv profiles: list the profiles with their components, base and lock state."""

from __future__ import annotations

import argparse

from verlenv.lock import resolve as lock
from verlenv.output import print_json, table
from verlenv.paths import find_root
from verlenv.profiles.profile import load_all

NAME = "profiles"
HELP = "List profiles (rollout engine, components, CUDA, base, snapshot, lock state); --json for CI matrices."


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def execute(args: argparse.Namespace) -> int:
    paths = find_root()
    profiles = load_all(paths)
    states = {s.profile: s.state for s in lock.check(paths, [p.name for p in profiles])}
    if args.json:
        print_json(
            {
                "profiles": [
                    {
                        "name": p.name,
                        "default": p.default,
                        "engine": p.engine,
                        "components": dict(p.components),
                        "cuda": p.cuda,
                        "python": p.python,
                        "platform": p.platform,
                        "base": p.base.name,
                        "snapshot": p.snapshot.isoformat(),
                        "lock": states[p.name],
                    }
                    for p in profiles
                ]
            }
        )
        return 0
    rows = [
        [
            p.name + (" (default)" if p.default else ""),
            p.component("verl") or "-",
            f"{p.engine} {p.component(p.engine)}" if p.engine != "none" else "-",
            p.component("torch") or "-",
            p.cuda,
            p.base.name,
            p.snapshot.isoformat(),
            states[p.name],
        ]
        for p in profiles
    ]
    print(table(["profile", "verl", "engine", "torch", "cuda", "base", "snapshot", "lock"], rows))
    return 0
