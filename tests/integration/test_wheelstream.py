"""A layer written straight from the wheels is the layer the locked pip and compileall write, byte for
byte: both run for real in a container of the real base, over real wheels of cpu-smoke's lock (pip's
own among them, two that ship one path) and a wheel made of pip's corner cases."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.helpers.edgewheel import METADATA, edge_wheel, plain_wheel
from verlenv.errors import CheckFailed
from verlenv.image import install
from verlenv.image.base import make_base
from verlenv.image.build import _wheels
from verlenv.image.context import group_layers
from verlenv.image.layerstore import LayerStore
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache

EPOCH = 1790294400
COLLIDING = {"opencensus", "opencensus-context"}  # both ship opencensus/__init__.py
SITE = "opt/venv/lib/python3.11/site-packages"


def _installer(engine, project_copy: ProjectPaths, cache: Cache, scratch: Cache, stream: bool):  # type: ignore[no-untyped-def]
    profile = load_profile(project_copy, "cpu-smoke")
    files = _wheels(project_copy, profile, read_lock(project_copy.lock("cpu-smoke")), cache)
    base = make_base(project_copy.bases, profile.base.name, cache, quiet=True)
    pip = install.pip_of(files)
    installer = install.Installer(
        engine, base.reference, base.layer.diff_id, pip, EPOCH, LayerStore(scratch), fresh=True, stream=stream
    )
    return installer, group_layers(profile, files), pip


def test_streamed_layer_is_pip_s_layer_byte_for_byte(  # type: ignore[no-untyped-def]
    engine, cpu_smoke_files, project_copy: ProjectPaths, cache: Cache, tmp_path: Path
) -> None:
    edge = edge_wheel(tmp_path)
    # two wheels shipping one path with different bytes: which one stays is pip's install order
    clash = [
        plain_wheel(tmp_path, n, {"clash/__init__.py": f"OWNER = {n!r}\n".encode()}) for n in ("clash-a", "clash_b")
    ]
    layers = {}
    for stream in (False, True):
        scratch = Cache(tmp_path / f"stream-{stream}")
        installer, groups, pip = _installer(engine, project_copy, cache, scratch, stream)
        deps = groups["deps"]
        chosen = tuple(h for h in deps if h.name in COLLIDING) + tuple(h for h in deps if h.name not in COLLIDING)[:12]
        chosen = tuple(sorted({*chosen, pip, edge, *clash}, key=lambda h: h.name))
        layers[stream] = install.wheels_layer(installer, scratch, "deps", chosen)
    assert layers[True].diff_id == layers[False].diff_id
    assert layers[True].entries() == layers[False].entries()
    assert layers[True].path.read_bytes() == layers[False].path.read_bytes()
    written = {e.path: e for e in layers[True].entries()}
    # the corners were exercised, not skipped
    assert f"{SITE}/edgecase/__pycache__/__init__.cpython-311.pyc" in written
    assert f"{SITE}/edgecase/__pycache__/broken.cpython-311.pyc" not in written
    assert written["opt/venv/bin/edge-tool"].mode == 0o755
    assert "opt/venv/include/site/python3.11/edgecase/edge.h" in written
    assert {"opt/venv/bin/pip", "opt/venv/bin/pip3", "opt/venv/bin/pip3.11"} <= written.keys()
    with tarfile.open(layers[True].path) as tar:
        tool = tar.extractfile("opt/venv/bin/edge-tool").read()  # type: ignore[union-attr]
        launcher = tar.extractfile("opt/venv/bin/edge-cli").read()  # type: ignore[union-attr]
        record = tar.extractfile(f"{SITE}/edgecase-1.0.dist-info/RECORD").read().decode()  # type: ignore[union-attr]
        owner = tar.extractfile(f"{SITE}/clash/__init__.py").read()  # type: ignore[union-attr]
    assert tool.startswith(b"#!/opt/venv/bin/python3\n")
    assert b"from edgecase import main" in launcher and b"setuptools" not in launcher
    assert "../../../bin/edge-tool,sha256=" in record and "edgecase/unlisted.txt,," in record
    assert owner == b"OWNER = 'clash-a'\n"  # pip installs by canonical name, descending: the first name last


def test_a_wheel_pip_would_refuse_fails_the_layer_naming_it(  # type: ignore[no-untyped-def]
    engine, cpu_smoke_files, project_copy: ProjectPaths, cache: Cache, tmp_path: Path
) -> None:
    scratch = Cache(tmp_path / "refused")
    installer, _, _ = _installer(engine, project_copy, cache, scratch, True)
    escaping = edge_wheel(tmp_path, {"../../escape.py": b"x = 1\n", **METADATA})
    with pytest.raises(CheckFailed, match=r"edgecase-1.0-py3-none-any.whl: .*would install outside"):
        install.wheels_layer(installer, scratch, "deps", (escaping,))
    assert not list(LayerStore(scratch).root.glob("*.tar")), "nothing was stored"
    assert not [p for p in LayerStore(scratch).root.iterdir() if p.name.startswith(".deps-")], "no scratch left"
