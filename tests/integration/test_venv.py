"""`verlenv venv` and `verlenv bundle` for real: cpu-smoke's verified wheels, real pip, real venvs.

No engine needed; these sit in the integration tier because they install the whole cpu-smoke lock
(120 wheels) into fresh environments. torch is reused from the interpreter running the tests, which
holds the same torch 2.13.0+cpu the lock pins, as a GPU host lends its CUDA torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache, sha256_of

PROFILE = "cpu-smoke"


def verlenv(*args: str, python: str = sys.executable, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "verlenv", *args], capture_output=True, text=True, check=False, timeout=900, cwd=cwd
    )


def doctor(venv: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    proc = subprocess.run(
        [str(venv / "bin" / "verlenv"), "doctor", "--static", "--json"], capture_output=True, text=True, check=False
    )
    return {c["id"]: c for c in json.loads(proc.stdout)["checks"]}


@pytest.fixture(scope="module")
def reusing_venv(project_copy: ProjectPaths, cache: Cache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("venvs") / "smoke"
    proc = verlenv(
        "venv", "--profile", PROFILE, str(target), "--reuse-from", sys.executable, "--reuse", "torch", "--json", "-q"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["venv"]["reused"]["torch"]["version"] == "2.13.0+cpu"
    return target


def test_venv_installs_the_lock_and_doctor_checks_it_like_an_image(reusing_venv: Path) -> None:
    manifest = json.loads((reusing_venv / "verlenv-manifest.json").read_text())
    assert manifest["kind"] == "venv" and manifest["profile"] == PROFILE
    assert set(manifest["reused"]) == {"torch"} and "torch" in manifest["distributions"]
    site = next((reusing_venv / "lib").glob("python3*/site-packages"))
    assert not (site / "torch").exists() and (reusing_venv / "reused" / "torch").is_symlink()
    checks = doctor(reusing_venv)
    assert checks["manifest-drift"]["status"] == "ok", checks["manifest-drift"]
    assert checks["requirements"]["status"] == "ok", checks["requirements"]
    # torch's own libraries are read in the site it is lent from: the extensions are checked against them
    assert checks["elf-abi"]["status"] == "ok" and "torch 2.13.0+cpu" in checks["elf-abi"]["summary"]
    assert checks["import-probe"]["status"] == "ok", checks["import-probe"]


def test_a_venv_lent_by_a_venv_that_was_itself_lent_links_the_real_files(reusing_venv: Path, tmp_path: Path) -> None:
    # the H200's SGLang venv reused the vLLM venv, whose torch was itself lent: the links pointed at
    # links, and doctor's ELF check found no libtorch behind them (25 false failures)
    target = tmp_path / "second"
    proc = verlenv(
        "venv", "--profile", PROFILE, str(target), "--reuse-from", str(reusing_venv / "bin" / "python"),
        "--reuse", "*", "--json", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    reused = json.loads(proc.stdout)["venv"]["reused"]
    import torch

    assert reused["torch"]["site"] == str(Path(torch.__file__).resolve().parent.parent)
    assert reused["six"]["site"] == str(next((reusing_venv / "lib").glob("python3*/site-packages")))
    checks = doctor(target)
    assert checks["elf-abi"]["status"] == "ok", checks["elf-abi"]
    assert checks["stale-artifacts"]["status"] == "ok", checks["stale-artifacts"]


def test_drift_after_a_change_in_place_is_caught(reusing_venv: Path, tmp_path: Path) -> None:
    site = next((reusing_venv / "lib").glob("python3*/site-packages"))
    six = next(site.glob("six-*.dist-info"))
    moved = tmp_path / six.name
    shutil.move(six, moved)  # as if `pip uninstall six` ran in the environment
    try:
        checks = doctor(reusing_venv)
    finally:
        shutil.move(moved, six)
    assert checks["manifest-drift"]["status"] == "fail" and "removed: six" in checks["manifest-drift"]["details"][0]


def test_a_lender_at_another_version_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    lender = tmp_path / "lender"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(lender)], check=True)
    fake = next((lender / "lib").glob("python3*/site-packages")) / "six-1.0.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: six\nVersion: 1.0\n")
    (fake / "RECORD").write_text("six-1.0.dist-info/METADATA,,\n")
    target = tmp_path / "venv"
    proc = verlenv(
        "venv", "--profile", PROFILE, str(target), "--reuse-from", str(lender / "bin/python"), "--reuse", "six"
    )
    assert proc.returncode == 2, proc.stderr
    assert "six: 1.0 there, the lock has" in proc.stderr
    assert not target.exists()


def test_a_non_empty_target_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    proc = verlenv("venv", "--profile", PROFILE, str(tmp_path))
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.fixture(scope="module")
def bundle(project_copy: ProjectPaths, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "smoke"
    proc = verlenv(
        "bundle", "--profile", PROFILE, "--python", "3.11", str(out), "--part-mib", "16",
        "--exclude", "torch", "--omit", "tensorboard", "--json", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    made = json.loads(proc.stdout)["bundle"]
    assert made["expected_on_target"] == {"torch": "2.13.0+cpu"} and "tensorboard" in made["omitted"]
    return out


def test_bundle_parts_are_capped_hashed_and_reproducible(bundle: Path, tmp_path: Path) -> None:
    manifest = json.loads((bundle / "bundle.json").read_text())
    parts = manifest["parts"]
    assert len(parts) > 1 and all(p["size"] <= 16 << 20 for p in parts)
    for part in parts:
        assert sha256_of(bundle / "parts" / part["name"]) == part["sha256"]
    again = tmp_path / "again"
    proc = verlenv("bundle", "--profile", PROFILE, "--python", "3.11", str(again), "--part-mib", "16",
                   "--exclude", "torch", "--omit", "tensorboard", "-q")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads((again / "bundle.json").read_text())["parts"] == parts  # same inputs, same bytes


def test_two_bundles_written_into_one_folder_at_once_give_one_whole_bundle_and_one_clear_refusal(
    project_copy: ProjectPaths, tmp_path: Path
) -> None:
    """Each run stages in a folder of its own: the first to finish keeps the name, the other is refused
    (exit 2) and leaves nothing, and what is there verifies part by part."""
    out = tmp_path / "shared"
    args = [sys.executable, "-m", "verlenv", "bundle", "--profile", PROFILE, "--python", "3.11", str(out),
            "--part-mib", "16", "--exclude", "torch", "-q"]  # fmt: skip
    runs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [run.communicate(timeout=900)[1] for run in runs]
    results = [(run.returncode, err) for run, err in zip(runs, errors, strict=True)]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert f"{out} exists" in refused and "Traceback" not in refused
    assert [p.name for p in tmp_path.iterdir()] == ["shared"]  # no staging folder left by either run
    parts = json.loads((out / "bundle.json").read_text())["parts"]
    assert all(sha256_of(out / "parts" / part["name"]) == part["sha256"] for part in parts)


def test_leaving_out_what_the_installer_runs_on_is_refused_and_nothing_is_written(
    project_copy: ProjectPaths, tmp_path: Path
) -> None:
    out = tmp_path / "b"
    proc = verlenv("bundle", "--profile", PROFILE, "--python", "3.11", str(out), "--exclude", "pack*", "-q")
    assert proc.returncode == 2, proc.stderr
    assert "would leave out packaging" in proc.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_install_checks_every_part_and_a_tampered_one_installs_nothing(bundle: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(bundle, damaged)
    part = sorted((damaged / "parts").iterdir())[2]
    data = bytearray(part.read_bytes())
    data[1000] ^= 0xFF
    part.write_bytes(bytes(data))
    target = tmp_path / "venv"
    # install.py needs only a Python: run it with no verlenv, packaging or pyelftools importable
    proc = subprocess.run(
        [sys.executable, "-I", str(damaged / "install.py"), str(target)], capture_output=True, text=True
    )
    assert proc.returncode == 6, proc.stderr
    assert f"part parts/{part.name}: sha256" in proc.stderr and "nothing was installed" in proc.stderr
    assert not target.exists()
    (damaged / "parts" / part.name).unlink()
    proc = subprocess.run(
        [sys.executable, "-I", str(damaged / "install.py"), str(target)], capture_output=True, text=True
    )
    assert proc.returncode == 6 and "is missing" in proc.stderr and not target.exists()


def test_install_from_the_bundle_with_nothing_but_python(bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "venv"
    proc = subprocess.run(
        [sys.executable, "-I", str(bundle / "install.py"), str(target), "--reuse-from", sys.executable],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((target / "verlenv-manifest.json").read_text())
    assert manifest["reused"]["torch"]["version"] == "2.13.0+cpu" and "tensorboard" in manifest["omitted"]
    checks = doctor(target)
    assert checks["manifest-drift"]["status"] == "ok", checks["manifest-drift"]
    # the omitted distribution is a warning that says why, not an unexplained failure
    assert checks["requirements"]["status"] == "warn" and "on purpose" in checks["requirements"]["details"][0]
