"""A missing package stops only the command that needs it, as a usage error with the install line.

Real isolated venvs, run with verlenv's core dependencies minus the one under test, so the import
really fails the way it does on a machine that lacks the package.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.fakewheels import Variant, build_pair
from tests.helpers.venvs import REPO, make_venv
from verlenv.errors import MissingDependency, require


def test_doctor_runs_without_pyelftools_and_reports_it(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv", without=("elftools",))
    torch, ext = build_pair(tmp_path / "wheels", Variant())  # a torch and an extension that links it
    venv.pip(str(torch), str(ext))
    proc = venv.verlenv("doctor", "--static", "--json")
    assert proc.returncode == 1, proc.stderr  # a check failed; not 3 (internal error)
    assert "internal error" not in proc.stderr
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["python"]["status"] == "ok"  # the other checks ran
    elf = checks["elf-abi"]
    assert elf["status"] == "fail" and "pyelftools" in elf["summary"]
    assert "pip install" in elf["fix"]


def test_lint_config_without_pyyaml_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")  # an isolated venv: no PyYAML
    config = REPO / "tests" / "data" / "verl-configs" / "typos.yaml"
    proc = venv.verlenv("lint-config", str(config), "--verl-wheel", str(tmp_path / "verl-0.9.1-py3-none-any.whl"))
    assert proc.returncode == 2, proc.stderr
    assert "PyYAML" in proc.stderr and "pip install" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_only_the_chosen_commands_module_is_imported() -> None:
    code = (
        "import sys; from verlenv.cli import build_parser; build_parser(['doctor', '--list']); "
        "print(sorted(m for m in sys.modules if m.startswith('verlenv.commands.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "['verlenv.commands.doctor']"


def test_require_names_the_package_and_the_install_line() -> None:
    with pytest.raises(MissingDependency) as caught:
        require("yaml_that_is_not_there")
    assert caught.value.exit_code == 2
    assert require("json").dumps([1]) == "[1]"


def test_an_unrelated_missing_module_stays_an_internal_error(tmp_path: Path) -> None:
    # A bug in verlenv (importing a module that does not exist) must not pass for a missing extra.
    from verlenv.errors import as_missing_dependency

    assert as_missing_dependency(ModuleNotFoundError("x", name="verlenv.nothing")) is None
    assert as_missing_dependency(ModuleNotFoundError("x", name="docker.errors")) is not None
