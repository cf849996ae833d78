"""What pip refuses, wheelstream refuses, naming the wheel and writing nothing; pip's launcher rules.
(That its layers are pip's, byte for byte, is tests/integration/test_wheelstream.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.edgewheel import FILES, INFO, METADATA, edge_wheel
from verlenv.image import wheelstream


def _run(tmp_path: Path, files: dict[str, bytes], name: str = "edgecase") -> tuple[int, Path]:
    wheel = edge_wheel(tmp_path, files, name=name)
    plan = {
        "prefix": "/opt/venv",
        "epoch": 0,
        "wheels_dir": str(tmp_path),
        "wheels": [{"name": name, "file": wheel.filename}],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "out"
    out.mkdir()
    return wheelstream.main([str(tmp_path / "plan.json"), str(out)]), out


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({**METADATA, f"{INFO}/WHEEL": b"Wheel-Version: 2.0\nRoot-Is-Purelib: true\n"}, "Wheel-Version '2.0'"),
        ({**METADATA, "../../escape.py": b"x = 1\n"}, "would install outside"),
        ({**METADATA, "edgecase-1.0.data/nowhere/x": b"x"}, "unknown scheme key 'nowhere'"),
        ({**METADATA, "other-1.0.dist-info/METADATA": b"Name: other\n"}, "2 .dist-info directories"),
        ({**METADATA, f"{INFO}/entry_points.txt": b"[console_scripts]\nedge = edgecase\n"}, "names no module:callable"),
    ],
)
def test_refused_naming_the_wheel_with_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, bytes], said: str
) -> None:
    code, out = _run(tmp_path, files)
    err = capsys.readouterr().err
    assert code == 3
    assert "edgecase-1.0-py3-none-any.whl" in err and said in err
    assert not list(out.iterdir())


def test_a_dist_info_of_another_project_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run(tmp_path, METADATA, name="other")
    assert code == 3 and "does not start with 'other'" in capsys.readouterr().err


def test_the_layer_and_its_entries(tmp_path: Path) -> None:
    code, out = _run(tmp_path, FILES)
    assert code == 0
    summary = json.loads((out / wheelstream.INFO).read_text())
    paths = {line.split("\t")[0]: line.split("\t") for line in summary["entries"]}
    site = f"opt/venv/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    assert paths["opt/venv/bin/edge-gui"][2] == "755"
    assert paths[f"{site}/edgecase/run.py"][2] == "755"
    assert paths[f"{site}/edgecase/__init__.py"][2] == "644"
    assert f"{site}/edgecase/__pycache__/stale.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc" not in paths
    assert summary["size"] == (out / wheelstream.TAR).stat().st_size


def test_pip_s_versioned_launchers() -> None:
    specs = wheelstream._console_specs({"pip": "pip._internal.cli.main:main", "pip3.8": "x:y", "tool": "t:m"})
    xy = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert [s.split(" = ")[0] for s in specs] == ["pip", f"pip{sys.version_info[0]}", f"pip{xy}", "tool"]


def test_a_long_interpreter_path_is_exec_ed_through_sh() -> None:
    assert wheelstream._shebang("/opt/venv/bin/python3") == b"#!/opt/venv/bin/python3\n"
    long = "/" + "x" * 130 + "/python3"
    assert wheelstream._shebang(long).startswith(b"#!/bin/sh\n'''exec' " + long.encode())


def test_pip_s_install_order_names_descending() -> None:
    wheels = [{"name": n} for n in ("Clash_A", "clash-b", "zeta", "alpha.x")]
    assert [w["name"] for w in wheelstream.install_order(wheels)] == ["zeta", "clash-b", "Clash_A", "alpha.x"]
