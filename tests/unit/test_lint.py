"""ruff runs in the test tier too, so `.ci/run` (the README's test command) enforces style."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean() -> None:
    # ruff of the interpreter running the tests (a test dependency), whatever PATH says
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "verlenv", "tests", "benchmarks", "noxfile.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    command = next(line.split("#")[0].strip() for line in readme.splitlines() if line.rstrip().endswith("# tests"))
    assert command in (ROOT / ".ci" / "run").read_text()
