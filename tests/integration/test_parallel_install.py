"""Several pips installing one layer at once give the layer one pip gives, byte for byte: real pip
in a container of the real base, real wheels from cpu-smoke's lock (two of which ship one path).
(pip installs layers where the lock's pip is one wheelstream.py does not reproduce.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from verlenv.image import install
from verlenv.image.base import make_base
from verlenv.image.build import _wheels
from verlenv.image.context import group_layers
from verlenv.image.layerstore import LayerStore
from verlenv.image.pipgroups import install_groups
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile
from verlenv.wheels.cache import Cache

EPOCH = 1790294400
COLLIDING = {"opencensus", "opencensus-context"}  # both ship opencensus/__init__.py


def test_parallel_pips_write_the_layer_one_pip_writes(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_profile(project_copy, "cpu-smoke")
    files = _wheels(project_copy, profile, read_lock(project_copy.lock("cpu-smoke")), cache)
    deps = group_layers(profile, files)["deps"]
    chosen = tuple(h for h in deps if h.name in COLLIDING) + tuple(h for h in deps if h.name not in COLLIDING)[:24]
    assert len(install_groups(chosen, 4)) == 4, "the test needs wheels that spread over four pips"
    base = make_base(project_copy.bases, profile.base.name, cache, quiet=True)
    layers = {}
    for pips in (1, 4):
        monkeypatch.setattr(install, "MAX_PIPS", pips)
        scratch = Cache(tmp_path / f"pips-{pips}")
        pip, store = install.pip_of(files), LayerStore(scratch)
        installer = install.Installer(
            engine, base.reference, base.layer.diff_id, pip, EPOCH, store, fresh=True, stream=False
        )
        layers[pips] = install.wheels_layer(installer, scratch, "deps", chosen)
    assert layers[4].diff_id == layers[1].diff_id
    assert layers[4].path.read_bytes() == layers[1].path.read_bytes()
    written = {e.path for e in layers[4].entries()}
    assert any(p.endswith("site-packages/opencensus/common/__init__.py") for p in written)


def test_pip_runs_from_its_wheel_s_files_compiled_once_by_the_base(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # from the zip, every pip process compiled pip's sources again (1.6-1.9 s for one small wheel)
    profile = load_profile(project_copy, "cpu-smoke")
    files = _wheels(project_copy, profile, read_lock(project_copy.lock("cpu-smoke")), cache)
    base = make_base(project_copy.bases, profile.base.name, cache, quiet=True)
    scratch = Cache(tmp_path / "tree")
    pip = install.pip_of(files)
    installer = install.Installer(engine, base.reference, base.layer.diff_id, pip, EPOCH, LayerStore(scratch))
    tree = install.pip_tree(installer, scratch)
    assert tree.parent == scratch.root / "pip" and tree.name.startswith(pip.sha256[:16])
    compiled = list((tree / "pip" / "__pycache__").glob("__init__.cpython-311.pyc"))
    assert compiled and int.from_bytes(compiled[0].read_bytes()[4:8], "little") == 0b01  # hash-based, unchecked
    assert not list(tree.glob("pip-*.dist-info"))  # only the package: pip is run, not installed

    def no_container(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the tree is made once")

    monkeypatch.setattr(install, "run_offline", no_container)
    assert install.pip_tree(installer, scratch) == tree
