"""Where pip's default index comes from when no index is configured: pip itself is asked, through an
interpreter that holds it, even when the pip found on PATH is a shell script (pyenv's shim)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from verlenv.lock import index


def _shim(folder: Path) -> Path:
    folder.mkdir()
    script = folder / "pip3"
    script.write_text(f'#!/usr/bin/env bash\nexec {sys.executable} -m pip "$@"\n')
    script.chmod(0o755)
    return script


@pytest.fixture
def no_configured_index(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    for var in ("VERLENV_INDEX_URL", "UV_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip then reads no configuration file at all
    index._pip_index_url.cache_clear()
    yield
    index._pip_index_url.cache_clear()


def test_a_pip_shim_on_path_still_gives_pips_own_default_index(  # type: ignore[no-untyped-def]
    no_configured_index, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shim = _shim(tmp_path / "shims")
    python_dir = tmp_path / "python-bin"
    python_dir.mkdir()
    (python_dir / "python3").symlink_to(sys.executable)  # a python3 that holds pip, as on PATH anywhere
    monkeypatch.setattr(index, "pip_command", lambda: [str(shim)])
    monkeypatch.setenv("PATH", f"{python_dir}:{Path(shutil.which('bash') or '/bin/bash').parent}")
    assert index._pythons_of([str(shim)]) == [str(python_dir / "python3")]  # bash is no interpreter for pip
    url = index.default_index_url()
    assert url.startswith("https://") and url.rstrip("/").endswith("/simple")


def test_an_env_shebang_names_the_interpreter_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "pip"
    script.write_text("#!/usr/bin/env python3\n")
    found = tmp_path / "bin"
    found.mkdir()
    (found / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(found))
    assert index._shebang(script) == str(found / "python3")
    script.write_text("#!/opt/venv/bin/python\n")
    assert index._shebang(script) == "/opt/venv/bin/python"
