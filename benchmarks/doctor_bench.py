"""`verlenv doctor` (full default run) vs `python -m torch.utils.collect_env` in the cpu-smoke image.

    python benchmarks/doctor_bench.py [--image verlenv/cpu-smoke:TAG] [--runs 5]

Both run in the same container (started once, commands exec'ed in turn), so the ratio compares
a verdict-giving doctor with a fact-printing reporter on the same machine. Target: doctor < 2 s.
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
        medians = {}
        for label, command in COMMANDS.items():
            container.exec_run(command)  # warm the page cache once
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                code, _ = container.exec_run(command)
                times.append(time.perf_counter() - started)
            medians[label] = statistics.median(times)
            print(f"{label:<26} median {medians[label]:.2f} s over {args.runs} runs (last exit {code})")
        ratio = medians["verlenv doctor"] / medians["torch.utils.collect_env"]
        print(f"{'doctor / collect_env':<26} {ratio:.2f}")
    finally:
        container.remove(force=True)


if __name__ == "__main__":
    main()
