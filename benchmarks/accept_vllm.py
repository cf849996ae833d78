"""The acceptance suite with the vLLM rollout backend, repeated: clean runs and injected leaks.

    python benchmarks/accept_vllm.py --out DIR [--reps 5] [--leaks 1] [--steps 30] [--smoke]

Each run is `verlenv accept --backend vllm --device cuda` in its own process (a vLLM engine per
run, as a job would have), with its report kept in DIR. Prints one row per run (time, reward,
memory slopes, per-step generation / weight-sync / training time, verdict), then the gate's
false-positive rate over the clean runs and how many injected leaks it caught.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def runs(reps: int, leaks: int) -> list[tuple[str, list[str]]]:
    plan = [(f"clean-{i}", ["--seed", str(i)]) for i in range(reps)]
    plan += [(f"leak-1MiB-{i}", ["--seed", str(i), "--inject-leak-mib", "1"]) for i in range(leaks)]
    return plan


def run_one(name: str, extra: list[str], out: Path, steps: int, smoke: bool) -> dict:  # type: ignore[type-arg]
    report = out / f"{name}.json"
    cmd = [sys.executable, "-m", "verlenv", "accept", "--backend", "vllm", "--device", "cuda", "-q"]
    cmd += ["--steps", str(steps), "--report", str(report), *extra]
    cmd += [] if smoke else ["--no-distributed"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if not report.exists():
        return {"name": name, "error": (proc.stderr or proc.stdout).strip().splitlines()[-5:], "exit": proc.returncode}
    data = json.loads(report.read_text())
    data["wall_s"] = round(time.perf_counter() - started, 1)
    return data


def row(name: str, report: dict) -> str:  # type: ignore[type-arg]
    if "error" in report:
        return f"{name:<14} ERROR exit {report['exit']}: {' | '.join(report['error'])}"
    steps = report["steps"]
    slopes = " ".join(
        f"{v['name'].removeprefix('memory-')}={v['value']:+.3f}"
        for v in report["verdicts"]
        if v["name"].startswith("memory-")
    )
    mean = {k: sum(s[k] for s in steps) / len(steps) for k in ("gen_s", "sync_s", "train_s")}
    failed = [v["name"] for v in report["verdicts"] if not v["passed"]]
    return (
        f"{name:<14} {report['wall_s']:6.1f}s (suite {report['seconds']:.1f}s) reward {steps[0]['reward']:.2f}->"
        f"{steps[-1]['reward']:.2f}  gen {mean['gen_s']:.3f}s sync {mean['sync_s']:.3f}s train {mean['train_s']:.3f}s"
        f"  {slopes}  {'PASS' if report['passed'] else 'FAIL: ' + ','.join(failed)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--leaks", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="also the two-process distributed smoke in each run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, extra in runs(args.reps, args.leaks):
        if args.first_seed:
            extra = [*extra[:1], str(int(extra[1]) + args.first_seed), *extra[2:]]
        results[name] = run_one(name, extra, args.out, args.steps, args.smoke)
        print(row(name, results[name]), flush=True)
    clean = [r for n, r in results.items() if n.startswith("clean-") and "error" not in r]
    leaks = [r for n, r in results.items() if n.startswith("leak-") and "error" not in r]
    print(
        f"clean runs failing the gate: {sum(not r['passed'] for r in clean)}/{len(clean)}; "
        f"injected leaks caught: {sum(not r['passed'] for r in leaks)}/{len(leaks)}"
    )
    (args.out / "accept_vllm.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
