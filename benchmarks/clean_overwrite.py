"""`verlenv clean` on a real vLLM tree before and after another vLLM version's files land on it in place.

    python benchmarks/clean_overwrite.py INSTALLED.whl OTHER.whl [--work DIR]

INSTALLED is installed with pip into an empty site-packages (`pip install --no-deps --target`),
then OTHER's files are unzipped over it without touching INSTALLED's RECORD: what an interrupted
upgrade, a copied tree or `unzip -o` leaves. clean must find nothing before, then the files OTHER
brought that INSTALLED's RECORD does not list; with --apply it removes exactly those and every
RECORDed path is still on disk afterwards. Prints the counts and times; exit 1 if any of it fails.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path


def clean(site: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    cmd = [sys.executable, "-m", "verlenv", "clean", "--site", str(site), "--no-caches", "--json", *extra]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    report = json.loads(proc.stdout)
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def recorded(site: Path) -> list[str]:
    record = next(site.glob("vllm-*.dist-info/RECORD"))
    with record.open(newline="") as handle:
        return [row[0] for row in csv.reader(handle) if row]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("installed", type=Path)
    parser.add_argument("other", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="verlenv-clean-"))
    site = work / "site-packages"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(site),
            str(args.installed),
        ],
        check=True,
    )
    before = clean(site)
    with zipfile.ZipFile(args.other) as archive:  # in place, over the installed tree, RECORD untouched
        members = [m for m in archive.namelist() if not m.split("/", 1)[0].endswith((".dist-info", ".data"))]
        archive.extractall(site, members)
    keep = recorded(site)
    present = {p for p in keep if (site / p).exists()}  # (a --target install puts ../../bin scripts elsewhere)
    after = clean(site)
    applied = clean(site, "--apply")
    missing = sorted(p for p in present if not (site / p).exists())
    final = clean(site)
    print(
        f"installed {args.installed.name}: {len(keep)} RECORDed paths; clean found {len(before['found'])} "
        f"({before['seconds']} s)"
    )
    print(
        f"after unzipping {args.other.name} over it ({len(members)} files): clean found {len(after['found'])} "
        f"({after['seconds']} s), kinds {sorted({f['kind'] for f in after['found']})}"
    )
    print(
        f"--apply removed {len(applied['removed'])}; RECORDed paths missing afterwards: {len(missing)}; "
        f"clean then finds {len(final['found'])}"
    )
    for item in after["found"][:8]:
        print(f"  {item['kind']}: {Path(item['path']).relative_to(site)}")
    ok = not before["found"] and after["found"] and not missing and not final["found"]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
