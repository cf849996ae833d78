"""Installing one layer's wheels into a tree of its own, in a container of the base, with no network.

The locked pip installs the layer's hashed requirements into a prefix that a bind mount brings back
to the host (so no tree is copied between builder stages), several pips at once over groups of
wheels that write disjoint paths (pipgroups.py), then the image's own Python compiles the
bytecode with hash-based validation and PYTHONHASHSEED=0, so the .pyc files are the same on every
machine. The layer writer (tarlayer.py) turns the tree into the layer.

pip runs from its own wheel's files, unpacked once per machine and compiled by the base's Python
(`pip_tree`): run from the zip, every pip process compiled its ~1 MB of sources again (1.6-1.9 s
for one small wheel, 0.5-0.7 s from the compiled tree), and a cold build starts about 20 of them.

Where the lock's pip is one whose installs wheelstream.py reproduces byte for byte, the layer is
written in the container straight from the wheels instead (no tree, no read-back): the same bytes,
so the same key and the same stored layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from verlenv import atomic
from verlenv.errors import CheckFailed, ConfigError
from verlenv.image import wheelstream
from verlenv.image.context import VENV, requirements_text, stage_wheels
from verlenv.image.layerstore import LayerStore, StoredLayer, parse_entry
from verlenv.image.pipgroups import install_groups
from verlenv.image.tarlayer import FILE, Item, LayerInfo, tree_items, write_layer
from verlenv.wheels.cache import Cache
from verlenv.wheels.wheelhouse import HouseFile

RECIPE_VERSION = 1  # bump when the install steps change what lands in a layer
PREFIX = VENV.lstrip("/")
GROUP_GLOB = "group-*.txt"
MAX_PIPS = 4  # pip processes installing one layer at once
_COMPILE = (
    f"PYTHONHASHSEED=0 {VENV}/bin/python3 {' '.join(wheelstream.COMPILEALL)} "
    f"-s /out -p {VENV} /out || true"  # files meant for other Pythons (torch's py312 intrinsics) never compile
)


@dataclass(frozen=True)
class Installer:
    """What every layer of one build is installed with."""

    client: object  # docker.DockerClient
    base_ref: str
    base_diff_id: str
    pip: HouseFile
    epoch: int
    store: LayerStore
    fresh: bool = False  # install again even when the store has the layer (--no-cache)
    report: Callable[[str], None] | None = None  # where each layer's install and write times go
    stream: bool | None = None  # write layers straight from the wheels; None: where the locked pip allows

    @property
    def streams(self) -> bool:
        return self.stream if self.stream is not None else self.pip.version in wheelstream.PIP_RELEASES

    def key(self, name: str, payload: str) -> str:
        blob = json.dumps(
            {
                "v": RECIPE_VERSION,
                "layer": name,
                "base": self.base_diff_id,
                "pip": self.pip.sha256,
                "epoch": self.epoch,
                "venv": VENV,
                "payload": payload,
            },
            sort_keys=True,
        )
        return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()}"


def pip_of(files: list[HouseFile]) -> HouseFile:
    found = [f for f in files if f.name == "pip"]
    if not found:
        raise ConfigError("the lock has no pip: images are installed with the locked pip", hint='add spec = "pip"')
    return found[0]


def venv_layer(installer: Installer, cache: Cache) -> StoredLayer:
    """The venv itself (pyvenv.cfg, bin/python links), made by the base's own `python3 -m venv`."""
    key = installer.key("venv", "python3 -m venv --without-pip")
    found = None if installer.fresh else installer.store.find(key)
    if found:
        return found
    script = f"set -e; python3 -m venv --without-pip {VENV}; cp -a {VENV}/. /out/"
    return _build(installer, cache, key, "venv", script, None, ())


def wheels_layer(
    installer: Installer, cache: Cache, name: str, items: tuple[HouseFile, ...], extra: tuple[Item, ...] = ()
) -> StoredLayer:
    """The layer of ``items``, from the store when these exact wheels were installed before."""
    payload = requirements_text(items) + "".join(f"+{i.entry.line()}\n" for i in extra)
    key = installer.key(name, payload)
    found = None if installer.fresh else installer.store.find(key)
    if found:
        return found
    if installer.streams:
        return _streamed(installer, cache, key, name, items, extra)
    pip = f"{VENV}/bin/python3 /pip/pip"  # the locked pip's own files (pip_tree)
    one = (
        f"{pip} install -q --no-index --no-deps --require-hashes --no-compile --ignore-installed "
        "--no-warn-script-location --disable-pip-version-check --find-links /wheels --prefix /out -r"
    )
    # one pip per group file at once (pipgroups.py: the groups write disjoint paths); set -e makes a
    # failed wait fail the layer
    script = (
        f"set -e; python3 -m venv --without-pip {VENV}; pids=; "
        f'for r in /wheels/{GROUP_GLOB}; do {one} "$r" & pids="$pids $!"; done; '
        f"for p in $pids; do wait $p; done; {_COMPILE}"
    )
    return _build(installer, cache, key, name, script, items, extra)


def _build(
    installer: Installer,
    cache: Cache,
    key: str,
    name: str,
    script: str,
    items: tuple[HouseFile, ...] | None,
    extra: tuple[Item, ...],
) -> StoredLayer:
    with tempfile.TemporaryDirectory(prefix=f"verlenv-layer-{name}-", dir=cache.tmp) as tmp:
        wheels, out = Path(tmp) / "wheels", Path(tmp) / "out"
        out.mkdir()
        if items is not None:
            stage_wheels(wheels, items)
            _write_groups(wheels, items)
        else:
            wheels.mkdir()
        started = time.monotonic()
        _run(installer, cache, name, script, wheels, out)
        installed = time.monotonic()
        staged = installer.store.staging(name)
        info = write_layer([*tree_items(out, PREFIX), *extra], staged, installer.epoch)
        shutil.rmtree(out, ignore_errors=True)
        if installer.report:  # where a cold build's time goes, layer by layer
            write = time.monotonic() - installed
            installer.report(f"layer {name}: installed in {installed - started:.1f}s, written in {write:.1f}s")
    return installer.store.put(key, staged, info)


def _streamed(
    installer: Installer, cache: Cache, key: str, name: str, items: tuple[HouseFile, ...], extra: tuple[Item, ...]
) -> StoredLayer:
    """The layer written by wheelstream.py in a container of the base, into a folder beside the store
    (so the tar is renamed in, never copied)."""
    with tempfile.TemporaryDirectory(prefix=f"verlenv-layer-{name}-", dir=cache.tmp) as tmp:
        wheels = Path(tmp) / "wheels"
        stage_wheels(wheels, items)
        plan = {
            "prefix": VENV,
            "epoch": installer.epoch,
            "wheels_dir": "/wheels",
            "wheels": [{"name": h.name, "file": h.filename} for h in items],
            "extra": [_extra_spec(item, wheels, n) for n, item in enumerate(extra)],
        }
        (wheels / wheelstream.PLAN).write_text(json.dumps(plan))
        out = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=installer.store.root))
        try:
            started = time.monotonic()
            _run_stream(installer, name, wheels, out)
            summary = json.loads((out / wheelstream.INFO).read_text())
            entries = tuple(parse_entry(line) for line in summary["entries"])
            stored = installer.store.put(
                key, out / wheelstream.TAR, LayerInfo(summary["diff_id"], summary["size"], entries)
            )
        finally:
            shutil.rmtree(out, ignore_errors=True)
    if installer.report:
        installer.report(f"layer {name}: installed and written in {time.monotonic() - started:.1f}s")
    return stored


def _extra_spec(item: Item, folder: Path, number: int) -> dict[str, object]:
    entry = item.entry
    spec: dict[str, object] = {"path": entry.path, "kind": entry.kind, "mode": entry.mode, "size": entry.size}
    spec |= {"target": entry.target, "uid": entry.uid, "gid": entry.gid}
    if entry.kind == FILE and item.open is not None:
        with item.open() as source:
            (folder / f"extra-{number}").write_bytes(source.read())
        spec["data"] = f"extra-{number}"
    return spec


def _run_stream(installer: Installer, name: str, wheels: Path, out: Path) -> None:
    package = Path(wheelstream.__file__).resolve().parents[1]  # verlenv/, read-only on PYTHONPATH
    volumes = {
        str(wheels): {"bind": "/wheels", "mode": "ro"},
        str(package): {"bind": "/verlenv-src/verlenv", "mode": "ro"},
        str(out): {"bind": "/layer", "mode": "rw"},
    }
    env = {"PYTHONPATH": "/verlenv-src", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    env["SOURCE_DATE_EPOCH"] = str(installer.epoch)
    script = (
        f"set -e; python3 -m venv --without-pip {VENV}; "
        f"{VENV}/bin/python3 -m verlenv.image.wheelstream /wheels/{wheelstream.PLAN} /layer"
    )
    _installed(name, *run_offline(installer.client, installer.base_ref, script, volumes, env))


def _write_groups(wheels: Path, items: tuple[HouseFile, ...]) -> None:
    for number, group in enumerate(install_groups(items, min(os.cpu_count() or 1, MAX_PIPS))):
        (wheels / GROUP_GLOB.replace("*", str(number))).write_text(requirements_text(group))


def _run(installer: Installer, cache: Cache, name: str, script: str, wheels: Path, out: Path) -> None:
    volumes = {
        str(wheels): {"bind": "/wheels", "mode": "ro"},
        str(pip_tree(installer, cache)): {"bind": "/pip", "mode": "ro"},
        str(out): {"bind": "/out", "mode": "rw"},
    }
    env = {"SOURCE_DATE_EPOCH": str(installer.epoch), "PIP_NO_CACHE_DIR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    _installed(name, *run_offline(installer.client, installer.base_ref, script, volumes, env))


def _installed(name: str, code: int, output: str) -> None:
    if code != 0:
        tail = output.strip().splitlines()[-25:]
        raise CheckFailed(f"installing the {name} layer failed; nothing was tagged:\n" + "\n".join(tail))


_PIP_TREE = threading.Lock()  # two layers install at once; the first makes the tree


def pip_tree(installer: Installer, cache: Cache) -> Path:
    """The locked pip's package, unpacked and compiled by the base's own Python (hash-checked .pyc, so
    nothing depends on file times), kept by the wheel's and the base's digests."""
    base = installer.base_diff_id.removeprefix("sha256:")[:16]
    tree = cache.root / "pip" / f"{installer.pip.sha256[:16]}-{base}"
    with _PIP_TREE:
        return atomic.make_folder(tree, cache.tmp, partial(_fill_pip_tree, installer))


def _fill_pip_tree(installer: Installer, work: Path) -> None:
    with zipfile.ZipFile(installer.pip.path) as wheel:
        wheel.extractall(work, [m for m in wheel.namelist() if m.startswith("pip/")])
    script = f"python3 {' '.join(wheelstream.COMPILEALL)} /pip/pip"
    volumes = {str(work): {"bind": "/pip", "mode": "rw"}}
    code, output = run_offline(installer.client, installer.base_ref, script, volumes, {"PYTHONHASHSEED": "0"})
    if code != 0:
        raise CheckFailed(f"compiling pip {installer.pip.version} in the base failed:\n{output.strip()[-2000:]}")


def run_offline(client, image: str, script: str, volumes: dict, env: dict[str, str]) -> tuple[int, str]:  # type: ignore[no-untyped-def, type-arg]
    """(exit code, output) of ``script`` in a throwaway container of ``image`` with no network at all."""
    container = client.containers.run(
        image, ["sh", "-c", script], detach=True, network_mode="none", volumes=volumes, environment=env
    )
    try:
        status = container.wait(timeout=3600)
        return int(status.get("StatusCode", 1)), container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
