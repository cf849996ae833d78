"""The acceptance suite's GPU matrix in one process: clean repetitions, leak injection, LoRA.

    python benchmarks/accept_gpu.py --out DIR [--reps 6]

Run from source on a GPU host (the device machine has no Docker). Writes DIR/accept_gpu.json
(every report in full) and prints a table: time, reward, memory slopes and verdicts per run,
then the gate's false-positive rate over the clean repetitions.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from verlenv.accept.loop import AcceptConfig
from verlenv.accept.suite import run_suite


def runs(reps: int) -> list[tuple[str, AcceptConfig, bool]]:
    matrix = [(f"clean-{i}", AcceptConfig(device="cuda", seed=i), i == 0) for i in range(reps)]
    matrix += [
        ("leak-1MiB", AcceptConfig(device="cuda", inject_leak_mib=1), False),
        ("leak-1MiB-seed1", AcceptConfig(device="cuda", inject_leak_mib=1, seed=1), False),
        ("lora", AcceptConfig(device="cuda", lora=True), False),
    ]
    return matrix


def row(name: str, report: dict) -> str:  # type: ignore[type-arg]
    steps = report["steps"]
    slopes = {
        v["name"].removeprefix("memory-"): v["value"] for v in report["verdicts"] if v["name"].startswith("memory-")
    }
    failed = [v["name"] for v in report["verdicts"] if not v["passed"]]
    slope_text = " ".join(f"{k}={v:+.3f}" for k, v in slopes.items())
    return (
        f"{name:<16} {report['seconds']:6.1f}s  reward {steps[0]['reward']:.2f}->{steps[-1]['reward']:.2f}  "
        f"{slope_text}  {'PASS' if report['passed'] else 'FAIL: ' + ','.join(failed)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    started = time.perf_counter()
    for name, config, distributed in runs(args.reps):
        report = run_suite(config, distributed=distributed)
        results[name] = report
        print(row(name, report), flush=True)
    clean = [r for n, r in results.items() if n.startswith("clean-")]
    false_positives = sum(not r["passed"] for r in clean)
    leaks_caught = sum(not r["passed"] for n, r in results.items() if n.startswith("leak-"))
    print(
        f"clean runs failing the gate: {false_positives}/{len(clean)}; injected leaks caught: {leaks_caught}/2; "
        f"total {time.perf_counter() - started:.0f}s"
    )
    (args.out / "accept_gpu.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
