"""Plan a build split by target between a host with many cores and a short lease (the H200) and this
build host: which objects the far host compiles, in which order, so its ninja finishes them inside the
lease. Ninja starts ready steps in build.ninja's order, so the far host's copy of build.ninja lists its
targets first, longest first (list scheduling, longest first); the commands themselves are unchanged,
so ninja's command hashes and the objects match the build here (benchmarks/ninja_merge.py joins them).

    python benchmarks/ext_split.py BUILD_NINJA TIMES_LOG RATIO JOBS SECONDS OUT_DIR [--keep PREFIX ...]
        [--exclude TARGETS ...]

TIMES_LOG: a .ninja_log of an earlier build of the same sources (per-object seconds), RATIO: how much
longer each object takes now (three architectures where that build had one), JOBS: the far host's
jobs, SECONDS: the time it has. Objects whose file name starts with a --keep prefix stay here (this
host builds them), and those listed in an --exclude file (an earlier plan's targets.txt) are taken.
Writes OUT_DIR/build.ninja and OUT_DIR/targets.txt; prints the plan.
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

from ninja_merge import read_log


def durations(log: Path) -> dict[str, float]:
    """object file name -> seconds its last compile took, from a .ninja_log."""
    steps = {Path(path).name: line.split("\t")[:2] for path, line in read_log(log)[1].items()}
    return {name: (int(end) - int(start)) / 1000 for name, (start, end) in steps.items()}


def makespan(seconds: list[float], jobs: int) -> float:
    free = [0.0] * jobs
    for s in seconds:
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def plan(candidates: list[tuple[str, float]], jobs: int, limit: float) -> list[tuple[str, float]]:
    chosen: list[tuple[str, float]] = []
    for item in sorted(candidates, key=lambda c: -c[1]):
        if makespan([s for _, s in chosen] + [item[1]], jobs) <= limit:
            chosen.append(item)
    return chosen


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    lines = Path(args.ninja).read_text().splitlines()
    statement = {line.split()[1].rstrip(":"): line for line in lines if line.startswith("build ")}
    known = durations(Path(args.times))
    taken = {o for f in args.exclude for o in Path(f).read_text().split()}
    candidates = [
        (o, known[Path(o).name] * args.ratio)
        for o in statement
        if Path(o).name in known and not Path(o).name.startswith(tuple(args.keep)) and o not in taken
    ]
    chosen = plan(candidates, args.jobs, args.seconds)
    first = {o for o, _ in chosen}
    ordered = [statement[o] for o, _ in chosen]
    rest = [line for o, line in statement.items() if o not in first]
    header = [line for line in lines if not line.startswith("build ")]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "build.ninja").write_text("\n".join(header + ordered + rest) + "\n")
    Path(args.out, "targets.txt").write_text("".join(o + "\n" for o, _ in chosen))
    span = makespan([s for _, s in chosen], args.jobs)
    print(f"{len(chosen)} objects, ~{sum(s for _, s in chosen):.0f} s of compile, makespan ~{span:.0f} s")
    for o, s in chosen:
        print(f"  {Path(o).name}  ~{s:.0f} s")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ninja", help="the build.ninja a build here wrote")
    parser.add_argument("times", help="a .ninja_log of an earlier build of the same sources")
    parser.add_argument("ratio", type=float, help="how much longer each object takes now")
    parser.add_argument("jobs", type=int, help="the far host's compile jobs")
    parser.add_argument("seconds", type=float, help="the time the far host has")
    parser.add_argument("out", help="folder for build.ninja and targets.txt")
    parser.add_argument("--keep", nargs="*", default=[], help="object name prefixes this host builds")
    parser.add_argument("--exclude", nargs="*", default=[], help="targets.txt of plans already sent")
    return parser


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
