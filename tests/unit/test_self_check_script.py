"""The image build's self-check line: clean --check and doctor --static both run, and either failing
fails the check with clean's output shown (a stand-in `verlenv` on PATH plays each outcome)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from verlenv.image.build import SELF_CHECK

STAND_IN = """#!/bin/bash
echo "$1 ran" >> "$RAN"
if [ "$1" = clean ]; then echo "clean says: $CLEAN_SAYS"; exit "$CLEAN_EXIT"; fi
echo "doctor says: ok-ish"; exit "$DOCTOR_EXIT"
"""


def _run(tmp_path: Path, clean: int, doctor: int) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "verlenv").write_text(STAND_IN)
    (bin_dir / "verlenv").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RAN=str(tmp_path / "ran"))
    env.update(CLEAN_EXIT=str(clean), DOCTOR_EXIT=str(doctor), CLEAN_SAYS="vllm/_C.abi3.so is stale")
    return subprocess.run(["bash", "-c", SELF_CHECK], env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("clean", "doctor", "passed"), [(0, 0, True), (1, 0, False), (0, 1, False), (1, 1, False)])
def test_both_run_and_either_fails_it(tmp_path: Path, clean: int, doctor: int, passed: bool) -> None:
    result = _run(tmp_path, clean, doctor)
    assert (result.returncode == 0) is passed, result.stdout
    assert sorted((tmp_path / "ran").read_text().split("\n")[:-1]) == ["clean ran", "doctor ran"]
    assert "clean says: vllm/_C.abi3.so is stale" in result.stdout  # shown whatever the outcome
    assert result.stdout.index("doctor says") < result.stdout.index("clean says")
