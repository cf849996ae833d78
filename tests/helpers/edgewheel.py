"""A wheel made of the corners of pip's install: .data schemes, a `#!python` script, a setuptools
launcher pip replaces, console and gui entry points, a file RECORD leaves out, executable members,
a source that does not compile, a shipped .pyc, a .py inside __pycache__."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

from tests.helpers.fakewheels import record_digest
from verlenv.wheels.wheelhouse import HouseFile

NAME, VERSION = "edgecase", "1.0"
INFO, DATA = f"{NAME}-{VERSION}.dist-info", f"{NAME}-{VERSION}.data"
FILES = {
    "edgecase/__init__.py": b"VALUE = 1\n",
    "edgecase/broken.py": b"def broken(:\n",  # no .pyc: compileall leaves it uncompiled
    "edgecase/run.py": b"#!/usr/bin/env python3\nprint('run')\n",
    "edgecase/__pycache__/stale.py": b"x = 1\n",  # compileall never walks into __pycache__
    "edgecase/__pycache__/__init__.cpython-311.pyc": b"not a pyc",  # replaced by the compiled one
    f"{DATA}/scripts/edge-tool": b"#!python\nimport edgecase\n",  # pip rewrites the #! line
    f"{DATA}/scripts/edge-cli": b"#!python\n# setuptools' launcher: pip writes its own\n",
    f"{DATA}/headers/edge.h": b"int edge(void);\n",
    f"{DATA}/data/share/edgecase/notes.txt": b"notes\n",
    f"{DATA}/purelib/edgecase_extra.py": b"EXTRA = 2\n",
    f"{INFO}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
    f"{INFO}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    f"{INFO}/entry_points.txt": (
        b"[console_scripts]\nedge-cli = edgecase:main\nedge-deep = edgecase.run:Main.go\n"
        b"[gui_scripts]\nedge-gui = edgecase.ui:run [extra]\n"
    ),
}
METADATA = {k: v for k, v in FILES.items() if k.startswith(f"{INFO}/")}  # a wheel of nothing else
UNLISTED = "edgecase/unlisted.txt"  # in the zip, not in RECORD
EXECUTABLE = {"edgecase/run.py", f"{DATA}/scripts/edge-tool"}


def edge_wheel(dest: Path, files: dict[str, bytes] | None = None, name: str = NAME) -> HouseFile:
    """The wheel (``files`` in place of FILES where given), as a wheelhouse entry."""
    return _wheel(dest, name, INFO, {**(FILES if files is None else files), UNLISTED: b"unlisted\n"}, {UNLISTED})


def plain_wheel(dest: Path, name: str, files: dict[str, bytes]) -> HouseFile:
    """A pure wheel of ``name`` holding ``files``."""
    info = f"{_escaped(name)}-{VERSION}.dist-info"
    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    return _wheel(dest, name, info, {**files, **meta})


def _wheel(dest: Path, name: str, info: str, files: dict[str, bytes], unlisted: set[str] = frozenset()) -> HouseFile:  # type: ignore[assignment]
    listed = [(p, d) for p, d in files.items() if p not in unlisted]
    record = "".join(f"{p},sha256={record_digest(d)},{len(d)}\n" for p, d in listed) + f"{info}/RECORD,,\n"
    path = dest / f"{_escaped(name)}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in [*files.items(), (f"{info}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(member, (2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if member in EXECUTABLE else 0o100644) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return HouseFile(name, VERSION, path.name, hashlib.sha256(path.read_bytes()).hexdigest(), path)


def _escaped(name: str) -> str:
    """A distribution name as wheel filenames and .dist-info folders spell it."""
    return re.sub(r"[-_.]+", "_", name)
