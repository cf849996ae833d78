"""`verlenv doctor --cluster` with the GPU checks and the NCCL all-reduce, on a one-node Ray cluster.

For a GPU host inside an image's root filesystem, with only the image's own Python (verlenv and Ray
come from the image; nothing is downloaded). It starts a Ray head here with every visible GPU,
runs `verlenv doctor --cluster --collective` (one NCCL rank per GPU: world size 1 on one H200) as
JSON and as a table, and stops Ray again, whatever happened. The Ray head listens on 127.0.0.1
only: a one-node cluster needs no other address, and the ray-address row says so (a warning).

    python benchmarks/h200_cluster.py OUT_DIR [--mib 256] [--timeout 300] [--num-gpus N]

OUT_DIR gets: doctor-cluster.json, doctor-cluster.txt, stderr of each step (*.err), ray-start.log,
facts.txt (interpreter, torch, GPUs) and summary.txt (the rows, the NCCL transport, the numbers).
The exit code is doctor's: 0 no check failed, 1 a check failed, 2 usage, 3 crash.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# NVLink multicast off: a program that uses it can take a shared host's GPUs out of service
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
FACTS = (
    "import sys, torch; print(sys.executable, sys.version.split()[0]); "
    "print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count()); "
    "[print(i, torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]"
)


def _env() -> dict[str, str]:
    return {**os.environ, **SAFE_ENV, **RAY_ENV, "PYTHONUNBUFFERED": "1"}


def _ray() -> list[str]:
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    if not found:
        raise SystemExit("no `ray` command beside this Python or on PATH: run this with the image's own Python")
    return [found]


def _step(out: Path, name: str, command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(), check=False)
    except subprocess.TimeoutExpired as exc:
        proc = subprocess.CompletedProcess(command, 124, str(exc.stdout or ""), f"timed out after {timeout:.0f} s")
    (out / f"{name}.err").write_text(proc.stderr)
    with (out / "commands.txt").open("a") as log:
        log.write(f"{' '.join(command)}  -> exit {proc.returncode} in {time.monotonic() - started:.1f} s\n")
    return proc


def _gpus(out: Path) -> int:
    proc = _step(out, "facts", [sys.executable, "-c", FACTS], 300)
    (out / "facts.txt").write_text(proc.stdout)
    for line in proc.stdout.splitlines():
        if line.startswith("torch "):
            return int(line.split()[-1])
    return 0


def _summary(report: dict) -> str:  # type: ignore[type-arg]
    lines = [f"exit {report['exit_code']}  {report['summary']}  {report['seconds']} s"]
    lines += [f"{row['status']:<5} {row['id']:<14} {row['summary']}" for row in report["checks"]]
    smoke = report.get("collective") or {}
    for rank in smoke.get("ranks", []):
        nccl = rank.get("nccl", {})
        lines.append(
            f"rank {rank['rank']} on {rank['node']}: sum_ok={rank.get('sum_ok')} "
            f"algbw={rank.get('algbw_gbps', 0):.2f} GB/s busbw={rank.get('busbw_gbps', 0):.2f} GB/s "
            f"latency={rank.get('latency_us', 0):.1f} us network={nccl.get('network')} via={nccl.get('via')} "
            f"error={rank.get('error', '')}"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for the results (made if missing)")
    parser.add_argument("--mib", type=float, default=256.0, help="all-reduce size for the bandwidth (default 256)")
    parser.add_argument("--timeout", type=float, default=300.0, help="doctor --cluster --timeout (default 300)")
    parser.add_argument("--num-gpus", type=int, help="GPUs to give Ray (default: what torch sees)")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    gpus = args.num_gpus if args.num_gpus is not None else _gpus(out)
    start = [*_ray(), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", "6379"]
    start += ["--include-dashboard=false", "--disable-usage-stats", "--num-gpus", str(gpus)]
    started = _step(out, "ray-start", start, 300)
    (out / "ray-start.log").write_text(started.stdout + started.stderr)
    if started.returncode != 0:
        print(f"ray start failed (exit {started.returncode}); see {out / 'ray-start.log'}", file=sys.stderr)
        return 3
    try:
        doctor = [sys.executable, "-m", "verlenv", "doctor", "--cluster", "--address", "127.0.0.1:6379"]
        doctor += ["--collective", "--collective-mib", f"{args.mib:g}", "--timeout", f"{args.timeout:g}"]
        proc = _step(out, "doctor-cluster-json", [*doctor, "--json"], args.timeout * 3)
        (out / "doctor-cluster.json").write_text(proc.stdout)
        table = _step(out, "doctor-cluster-table", doctor, args.timeout * 3)
        (out / "doctor-cluster.txt").write_text(table.stdout)
        print(table.stdout)
        try:
            summary = _summary(json.loads(proc.stdout))
        except (ValueError, KeyError) as exc:
            summary = f"no JSON from doctor --cluster (exit {proc.returncode}): {exc}\n{proc.stderr[-2000:]}\n"
        (out / "summary.txt").write_text(summary)
        print(summary)
        return proc.returncode
    finally:
        stopped = _step(out, "ray-stop", [*_ray(), "stop", "--force"], 120)
        (out / "ray-stop.log").write_text(stopped.stdout + stopped.stderr)


if __name__ == "__main__":
    sys.exit(main())
