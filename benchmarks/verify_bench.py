"""Time `verlenv verify` cold (empty symbol cache) and warm, and the ELF check of one vLLM x torch pair.

    python benchmarks/verify_bench.py [--profile NAME]

Wheel files come from the normal cache (run `verlenv verify --profile NAME` once first, which
downloads them); the symbol cache starts empty in a temp dir whose files/ tree is hard-linked to
the normal one, so "cold" measures ELF parsing, not the network. Prints one line per figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from verlenv.lock.lockfile import read_lock
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile
from verlenv.verify.abi import check_objects, torch_facts
from verlenv.verify.objscan import is_shared_object
from verlenv.verify.report import verify_profile
from verlenv.verify.wheelscan import scan_wheel
from verlenv.wheels.cache import Cache, default_root
from verlenv.wheels.wheelhouse import fill


def _linked_cache(source: Cache, into: Path) -> Cache:
    shutil.copytree(source.root / "files", into / "files", copy_function=os.link)
    return Cache(into)


def _members(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()


def _timed(label: str, func):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = func()
    seconds = time.perf_counter() - started
    print(f"{label:<48} {seconds:7.2f} s")
    return result, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="verl0.9.1-vllm0.24.0-torch2.11.0-cu130")
    args = parser.parse_args()
    paths = find_root()
    profile = load_profile(paths, args.profile)
    lock = read_lock(paths.lock(args.profile))
    shared = Cache(default_root())
    print(f"profile {args.profile}: {len(lock.dists)} distributions, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        cache = _linked_cache(shared, Path(tmp) / "pair")
        house = fill(profile, lock, cache, offline=True, quiet=True)
        torch_file, vllm_file = house.get("torch"), house.get("vllm")
        names = [
            n.rsplit("/", 1)[-1] for f in house.files if f.is_wheel for n in _members(f.path) if is_shared_object(n)
        ]
        if torch_file and vllm_file:

            def pair():  # type: ignore[no-untyped-def]
                with ThreadPoolExecutor() as pool:  # as verify does: both wheels at once
                    scans = list(pool.map(lambda f: scan_wheel(f, cache), (torch_file, vllm_file)))
                objects = [o for s in scans for o in s.objects]
                torch = torch_facts(torch_file.version, objects)
                base = profile.base.facts
                return check_objects(objects, torch, base, {}, other_names=names)

            verdicts, _ = _timed(f"pair vllm {vllm_file.version} x torch {torch_file.version}, cold", pair)
            _timed(f"pair vllm {vllm_file.version} x torch {torch_file.version}, warm", pair)
            print(f"{'pair verdicts':<48} {sum(v.ok for v in verdicts)}/{len(verdicts)} ok")
        cache = _linked_cache(shared, Path(tmp) / "full")
        report, cold = _timed(
            "full verify, cold symbol cache",
            lambda: verify_profile(paths, args.profile, cache, offline=True, quiet=True),
        )
        _, warm = _timed(
            "full verify, warm", lambda: verify_profile(paths, args.profile, cache, offline=True, quiet=True)
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'result':<48} {'PASS' if report.ok else 'FAIL'}")
    print(f"{'warm / cold ratio':<48} {warm / cold:7.3f}")
    print(f"{'peak RSS':<48} {peak:7.0f} MiB")


if __name__ == "__main__":
    main()
