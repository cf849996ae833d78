"""The command line: exit-code table, --help, console script."""

from __future__ import annotations

import subprocess
import sys

import pytest

from verlenv.cli import main
from verlenv.errors import ERROR_CLASSES, exit_code_table


def test_exit_codes_are_unique_and_documented() -> None:
    codes = [cls.exit_code for cls in ERROR_CLASSES]
    assert len(set(codes)) == len(codes)
    assert [c for c, _ in exit_code_table()] == [0, 1, 2, 3, 4, 5, 6]


def test_readme_lists_the_same_exit_codes() -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for code, meaning in exit_code_table():
        assert f"| {code} | {meaning} |" in readme


def test_usage_error_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_console_script_help_shows_table() -> None:
    out = subprocess.run([sys.executable, "-m", "verlenv", "--help"], capture_output=True, text=True, check=True).stdout
    assert "exit codes:" in out and "6  integrity failure" in out
