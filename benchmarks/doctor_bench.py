"""`verlenv doctor` (full default run) vs `python -m torch.utils.collect_env` in the cpu-smoke image.

    python benchmarks/doctor_bench.py [--image verlenv/cpu-smoke:TAG] [--runs 5]

All run in the same container (started once, the commands exec'ed in turn, round by round, so
a slow spell of the machine hits each alike), so the ratio compares a verdict-giving doctor with a
fact-printing reporter on the same machine. `import torch` alone is printed as the floor both
share. Targets (issue 16): doctor / collect_env <= 1.0, doctor <= 1.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import time

from verlenv.image.services import ensure_engine
from verlenv.lock.lockfile import read_lock
from verlenv.paths import find_root

COMMANDS = {
    "verlenv doctor": ["verlenv", "doctor"],
    "torch.utils.collect_env": ["python", "-m", "torch.utils.collect_env"],
    "import torch (the floor)": ["python", "-c", "import torch"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    lock = read_lock(find_root().lock("cpu-smoke"))
    parser.add_argument("--image", default=f"verlenv/cpu-smoke:{lock.sha256[:12]}")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    engine = ensure_engine()
    container = engine.containers.run(
        args.image, ["sleep", "infinity"], detach=True, network_mode="none", shm_size="1g"
    )
    try:
        times: dict[str, list[float]] = {label: [] for label in COMMANDS}
        codes: dict[str, int] = {}
        for command in COMMANDS.values():
            container.exec_run(command)  # warm the page cache once
        for _ in range(args.runs):
            for label, command in COMMANDS.items():
                started = time.perf_counter()
                codes[label], _ = container.exec_run(command)
                times[label].append(time.perf_counter() - started)
        medians = {label: statistics.median(values) for label, values in times.items()}
        for label, median in medians.items():
            print(f"{label:<26} median {median:.2f} s over {args.runs} runs (last exit {codes[label]})")
        ratio = medians["verlenv doctor"] / medians["torch.utils.collect_env"]
        print(f"{'doctor / collect_env':<26} {ratio:.2f}")
    finally:
        container.remove(force=True)


if __name__ == "__main__":
    main()
