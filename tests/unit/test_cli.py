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


def test_sigterm_unwinds_like_ctrl_c(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A command blocked on the network (a catalog server that accepts and never answers) and sent
    SIGTERM, as a CI timeout does, unwinds through its cleanup: exit 130 and 'interrupted'."""
    import signal
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/catalog.json"
        command = [sys.executable, "-m", "verlenv", "pull", "cpu-smoke", "--catalog", url]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        connection, _ = silent.accept()  # it is waiting for the answer now
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        connection.close()
    assert process.returncode == 130, err
    assert "interrupted" in err
