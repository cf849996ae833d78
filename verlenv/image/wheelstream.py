"""One layer's wheels written straight into the layer's tar, in a container of the base, no network.

This runs inside the container, under the venv's own interpreter (``/opt/venv/bin/python3``, as
pip ran), with verlenv's package mounted read-only on PYTHONPATH; it needs the standard library
and ``tarlayer`` only. It writes what the locked pip (``PIP_RELEASES``) followed by
``compileall --invalidation-mode unchecked-hash`` left in the tree, byte for byte: the same files
at the same places, RECORD, INSTALLER and REQUESTED as pip writes them, pip's console-script
launchers and ``#!python`` fix-ups, and the .pyc of this interpreter's own ``python -m compileall``
run over the sources alone. The other entries go from the wheels into the tar: the tree is not
written to disk, read back, hashed and removed (in a cold default build, 75 core-s of verlenv's
and most of the 90 core-s of pip's own per-file work). tests/integration/test_wheelstream.py holds
it to pip's layer, DiffID for DiffID.

What pip would refuse is refused here, naming the wheel: a second or a missing .dist-info, a Wheel
major version other than 1, a path that leaves its scheme directory, an entry point without a
callable.
"""

# pip's own os.path arithmetic, kept so that every path comes out as pip's does:
# ruff: noqa: PTH100, PTH118, PTH119
from __future__ import annotations

import csv
import email.parser
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import json
import os
import posixpath
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from base64 import urlsafe_b64encode
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path, PurePosixPath

from verlenv.image.tarlayer import DIR, FILE, Entry, Item, write_layer

PIP_RELEASES = ("26.2.1",)  # whose wheel installs this reproduces; other locked pips install themselves
PLAN = "plan.json"
TAR, INFO = "layer.tar", "layer.json"
_SCRIPT = (
    "import sys\n"
    "from %(module)s import %(import_name)s\n"
    "if __name__ == '__main__':\n"
    "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
    "    sys.exit(%(func)s())\n"
)
_ENTRY = re.compile(  # distlib's export-entry grammar, which pip's launcher maker parses with
    r"(?P<name>([^\[]\S*))\s*=\s*(?P<callable>(\w+)([:\.]\w+)*)"
    r"\s*(\[\s*(?P<flags>[\w-]+(=\w+)?(,\s*\w+(=\w+)?)*)\s*\])?"
)
# How every .pyc of an image is compiled (after pip in install.py, and here), with -s and -p naming the
# tree's folders: one definition, since the two paths must give the same bytes.
COMPILEALL = ("-m", "compileall", "-qq", "-j", "0", "--invalidation-mode", "unchecked-hash")
_HOME_KEYS = ("installed_base", "base", "installed_platbase", "platbase", "prefix", "exec_prefix")


class WheelError(Exception):
    """A wheel pip would refuse; the message names it."""


@dataclass(frozen=True)
class Placed:
    """One installed file: from a wheel's member, or bytes made here."""

    executable: bool
    wheel: str = ""
    member: str = ""
    data: bytes | None = None
    size: int = 0


@dataclass(frozen=True)
class Scheme:
    purelib: str
    platlib: str
    headers: str
    scripts: str
    data: str


def scheme(prefix: str, dist: str) -> Scheme:
    """pip's --prefix scheme in a virtual environment (pip/_internal/locations/_sysconfig.py)."""
    keys = [*_HOME_KEYS, *(["userbase"] if sysconfig.get_config_var("userbase") is not None else [])]
    paths = sysconfig.get_paths(scheme=sysconfig.get_preferred_scheme("prefix"), vars=dict.fromkeys(keys, prefix))
    include = os.path.join(prefix, "include", "site", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    return Scheme(paths["purelib"], paths["platlib"], os.path.join(include, dist), paths["scripts"], paths["data"])


class _WheelMeta(importlib.metadata.Distribution):
    """A wheel's .dist-info as importlib.metadata reads it: pip's own source of entry points."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self._files = files

    def read_text(self, filename: str) -> str | None:  # type: ignore[override]
        data = self._files.get(filename)
        return None if data is None else data.decode("utf-8")

    def locate_file(self, path):  # type: ignore[no-untyped-def, override]
        return PurePosixPath(path)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _info_dir(wheel: zipfile.ZipFile, label: str, name: str) -> str:
    found = sorted({n.split("/", 1)[0] for n in wheel.namelist()} - {""})
    dirs = [d for d in found if d.endswith(".dist-info")]
    if len(dirs) != 1:
        raise WheelError(f"{label}: {len(dirs)} .dist-info directories, a wheel has one")
    if not _canonical(dirs[0]).startswith(_canonical(name)):
        raise WheelError(f"{label}: .dist-info directory {dirs[0]!r} does not start with {name!r}")
    return dirs[0]


def _record_digest(data: bytes) -> tuple[str, str]:
    return "sha256=" + urlsafe_b64encode(hashlib.sha256(data).digest()).decode("latin1").rstrip("="), str(len(data))


def _executable(info: zipfile.ZipInfo) -> bool:
    mode = info.external_attr >> 16
    return bool(mode and stat.S_ISREG(mode) and mode & 0o111)


def _within(directory: str, target: str) -> bool:
    directory, target = os.path.abspath(directory), os.path.abspath(target)
    return os.path.commonprefix([directory, target]) == directory  # noqa: RUF071 - pip's is_within_directory


class _Wheel:
    """pip's _install_wheel over one wheel, placing into ``files`` instead of writing a tree."""

    def __init__(self, archive: zipfile.ZipFile, name: str, prefix: str, files: dict[str, Placed]) -> None:
        self.zip, self.name, self.files = archive, name, files
        self.path = str(archive.filename)  # the key of this archive in install()'s open wheels
        self.label = os.path.basename(self.path)
        self.info_dir = _info_dir(self.zip, self.label, name)
        meta = {m.split("/", 1)[1]: self.zip.read(m) for m in self.zip.namelist() if m.startswith(f"{self.info_dir}/")}
        self.meta = _WheelMeta(meta)
        wheel = email.parser.Parser().parsestr(meta.get("WHEEL", b"").decode())
        if wheel.get("Wheel-Version", "").split(".")[0] != "1":
            raise WheelError(f"{self.label}: Wheel-Version {wheel.get('Wheel-Version')!r}; pip installs version 1")
        self.scheme = scheme(prefix, name)
        purelib = wheel.get("Root-Is-Purelib", "").lower() == "true"
        self.lib_dir = self.scheme.purelib if purelib else self.scheme.platlib
        self.installed: dict[str, str] = {}
        self.changed: set[str] = set()

    def install(self, executable: str) -> None:
        members = [n for n in self.zip.namelist() if not n.endswith("/")]
        data = [n for n in members if n.split("/", 1)[0].endswith(".data")]
        root = [n for n in members if not n.split("/", 1)[0].endswith(".data")]
        scripts = {n for n in data if self._is_script(n)}
        console, gui = self._entry_points()
        for member in root:
            self._place(member, self._root_dest(member))
        for member in data:
            if member not in scripts:
                self._place(member, self._data_dest(member))
        for member in [n for n in data if n in scripts]:
            dest = self._data_dest(member)
            if not _is_wrapper(dest, console, gui):
                self._place(member, dest, fix=executable)
        generated = [*self._launchers(_console_specs(console), executable)]
        generated += self._launchers([f"{k} = {v}" for k, v in gui.items()], executable)
        generated += [self._generate("INSTALLER", b"pip\n"), self._generate("REQUESTED", b"")]
        self._record(generated)

    def _is_script(self, member: str) -> bool:
        parts = member.split("/", 2)
        return len(parts) > 2 and parts[0].endswith(".data") and parts[1] == "scripts"

    def _entry_points(self) -> tuple[dict[str, str], dict[str, str]]:
        console: dict[str, str] = {}
        gui: dict[str, str] = {}
        for point in self.meta.entry_points:
            if point.group == "console_scripts":
                console[point.name] = point.value
            elif point.group == "gui_scripts":
                gui[point.name] = point.value
        return console, gui

    def _root_dest(self, member: str) -> str:
        return self._checked(self.lib_dir, os.path.join(self.lib_dir, os.path.normpath(member)))

    def _data_dest(self, member: str) -> str:
        try:
            _, key, below = os.path.normpath(member).split(os.path.sep, 2)
        except ValueError:
            raise WheelError(f"{self.label}: {member!r}: .data contents are named <scheme key>/<path>") from None
        if key not in Scheme.__dataclass_fields__:
            raise WheelError(f"{self.label}: {member!r}: unknown scheme key {key!r}")
        directory = getattr(self.scheme, key)
        return self._checked(directory, os.path.join(directory, below))

    def _checked(self, directory: str, dest: str) -> str:
        if not _within(directory, dest):
            raise WheelError(f"{self.label}: {dest!r} would install outside {directory!r}")
        return dest

    def _place(self, member: str, dest: str, fix: str = "") -> None:
        info = self.zip.getinfo(member)
        placed = Placed(_executable(info), self.path, member, None, info.file_size)
        if fix:
            content = self.zip.read(info)
            first, _, rest = content.partition(b"\n")
            if first.startswith(b"#!python"):  # pip's fix_script: the line becomes this interpreter's
                content = b"#!" + fix.encode(sys.getfilesystemencoding()) + os.linesep.encode("ascii") + rest
                placed = Placed(placed.executable, data=content, size=len(content))
                self.changed.add(self._record_path(dest))
        self.files[dest] = placed
        self.installed[member] = self._record_path(dest)

    def _launchers(self, specs: list[str], executable: str) -> list[str]:
        made = []
        for spec in specs:
            name, module, func = _export_entry(spec, self.label)
            dest = os.path.abspath(os.path.join(self.scheme.scripts, name))
            if dest == os.path.abspath(self.scheme.scripts) or not _within(self.scheme.scripts, dest):
                raise WheelError(f"{self.label}: entry point name {name!r} would install outside the scripts directory")
            text = _SCRIPT % {"module": module, "import_name": func.split(".")[0], "func": func}
            content = _shebang(executable) + text.encode("utf-8")
            self.files[dest] = Placed(True, data=content, size=len(content))
            made.append(dest)
        return made

    def _generate(self, leaf: str, content: bytes) -> str:
        dest = os.path.join(self.lib_dir, self.info_dir, leaf)
        self.files[dest] = Placed(False, data=content, size=len(content))
        return dest

    def _record_path(self, dest: str) -> str:
        return os.path.relpath(dest, self.lib_dir).replace(os.path.sep, "/")

    def _record(self, generated: list[str]) -> None:
        """pip's RECORD: the wheel's rows at their installed paths, rehashed where changed, then the
        generated files, then installed files the wheel's RECORD left out; sorted."""
        installed = dict(self.installed)
        rows = []
        for row in csv.reader((self.meta.read_text("RECORD") or "").splitlines()):
            path = installed.pop(row[0], row[0])
            if path in self.changed:
                rows.append((path, *_record_digest(self._content(os.path.join(self.lib_dir, path)))))
            else:
                rows.append((path, row[1] if len(row) > 1 else "", row[2] if len(row) > 2 else ""))
        for dest in generated:
            rows.append((self._record_path(dest), *_record_digest(self._content(dest))))
        rows += [(path, "", "") for path in installed.values()]
        text = io.StringIO(newline="")
        csv.writer(text).writerows(sorted((p, h, str(s)) for p, h, s in rows))
        self._generate("RECORD", text.getvalue().encode("utf-8"))

    def _content(self, dest: str) -> bytes:
        placed = self.files[os.path.normpath(dest)]  # changed and generated files: made here, in memory
        assert placed.data is not None, dest
        return placed.data


def _is_wrapper(dest: str, console: dict[str, str], gui: dict[str, str]) -> bool:
    """A script setuptools generated for an entry point (EP, EP.exe, EP-script.py): pip makes its own."""
    name = os.path.basename(dest)
    lower = name.lower()
    for suffix in (".exe", "-script.py", ".pya"):
        if lower.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name in console or name in gui


def _console_specs(console: dict[str, str]) -> list[str]:
    """pip's versioned pip / easy_install launchers, then the rest in the wheel's order."""
    console, specs = dict(console), []
    xy = f"{sys.version_info[0]}.{sys.version_info[1]}"
    ensurepip = os.environ.get("ENSUREPIP_OPTIONS")
    pip = console.pop("pip", None)
    if pip:
        specs += [f"pip = {pip}"] if ensurepip is None else []
        specs += [f"pip{sys.version_info[0]} = {pip}"] if ensurepip != "altinstall" else []
        specs.append(f"pip{xy} = {pip}")
        for key in [k for k in console if re.match(r"pip(\d+(\.\d+)?)?$", k)]:
            del console[key]
    easy = console.pop("easy_install", None)
    if easy:
        specs += [f"easy_install = {easy}"] if ensurepip is None else []
        specs.append(f"easy_install-{xy} = {easy}")
        for key in [k for k in console if re.match(r"easy_install(-\d+\.\d+)?$", k)]:
            del console[key]
    return specs + [f"{k} = {v}" for k, v in console.items()]


def _export_entry(spec: str, label: str) -> tuple[str, str, str]:
    found = _ENTRY.search(spec)
    flags_ok = found and (found.group("flags") is not None or ("[" not in spec and "]" not in spec))
    if not found or not flags_ok or found.group("callable").count(":") != 1:
        raise WheelError(f"{label}: entry point {spec!r} names no module:callable")
    module, func = found.group("callable").split(":")
    return found.group("name"), module, func


def _shebang(executable: str) -> bytes:
    """distlib's: the interpreter itself, or /bin/sh exec-ing it where a kernel would cut the line."""
    exe = executable.encode("utf-8")
    if b" " not in exe and len(exe) + 3 <= 127:
        return b"#!" + exe + os.linesep.encode()
    return b"#!/bin/sh\n'''exec' " + exe + b' "$0" "$@"\n' + b"' '''\n"


# -- bytecode: the image's own compileall, over the .py files alone ------------------------------


def _compiled(files: dict[str, Placed], prefix: str, zips: dict[str, zipfile.ZipFile]) -> dict[str, Placed]:
    """The .pyc that ``compileall -j 0 --invalidation-mode unchecked-hash`` makes of every .py below
    ``prefix``, run as pip's tree got it: a separate `python -m compileall`, same arguments, same
    environment. In Python 3.11 marshal marks an object shared by its reference count, so the bytes of
    a .pyc depend on what else the compiling process holds: compiled here (beside zipfile, tarfile,
    this module) 1 of 36,584 .pyc of cpu-smoke's deps came out 10 bytes longer. Only the sources are
    written, to a scratch tree: a few percent of the layer's bytes."""
    sources = sorted(p for p in files if p.endswith(".py"))
    with tempfile.TemporaryDirectory(prefix="verlenv-py-") as scratch:
        for path in sources:
            target = Path(scratch + path[len(prefix) :])
            target.parent.mkdir(parents=True, exist_ok=True)
            with _opener(files[path], zips)() as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the interpreter as pip's step ran it
        subprocess.run([sys.executable, *COMPILEALL, "-s", scratch, "-p", prefix, scratch], env=env, check=False)
        found = {path: _pyc(Path(scratch + path[len(prefix) :])) for path in sources}
    return {importlib.util.cache_from_source(path): pyc for path, pyc in found.items() if pyc is not None}


def _pyc(source: Path) -> Placed | None:
    """The .pyc compileall left for ``source``: none where the source does not compile (as pip's step)."""
    try:
        data = Path(importlib.util.cache_from_source(str(source))).read_bytes()
    except FileNotFoundError:
        return None
    return Placed(False, data=data, size=len(data))


# -- the layer -------------------------------------------------------------------------------------


def items(files: dict[str, Placed], prefix: str, zips: dict[str, zipfile.ZipFile]) -> list[Item]:
    """Tar items of ``files`` (absolute paths), every directory above them and ``prefix`` itself."""
    found: list[Item] = []
    dirs: set[str] = set()
    top = prefix.strip("/")
    while top:
        dirs.add(top)
        top = posixpath.dirname(top)
    for path, placed in files.items():
        rel = path.lstrip("/")
        parent = posixpath.dirname(rel)
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
        mode = 0o755 if placed.executable else 0o644
        found.append(Item(Entry(rel, FILE, mode, size=placed.size), _opener(placed, zips)))
    return [*(Item(Entry(d, DIR, 0o755)) for d in dirs), *found]


def _opener(placed: Placed, zips: dict[str, zipfile.ZipFile]):  # type: ignore[no-untyped-def]
    if placed.data is not None:
        return partial(io.BytesIO, placed.data)
    return partial(zips[placed.wheel].open, placed.member)


def install(plan: dict, out: Path) -> dict:  # type: ignore[type-arg]
    """Write the layer of ``plan``'s wheels to ``out``/layer.tar; its DiffID, size and entries to
    ``out``/layer.json."""
    prefix, executable = plan["prefix"], sys.executable
    files: dict[str, Placed] = {}
    # each wheel's central directory read once (torch's alone is 15,000 entries), then its members opened from it
    zips: dict[str, zipfile.ZipFile] = {}
    for wheel in install_order(plan["wheels"]):  # where two wheels ship one path, the later one's stays
        path = os.path.join(plan["wheels_dir"], wheel["file"])
        zips[path] = zipfile.ZipFile(path, allowZip64=True)
        _Wheel(zips[path], wheel["name"], prefix, files).install(executable)
    files.update(_compiled(files, prefix, zips))
    extra = [_extra_item(e, plan["wheels_dir"]) for e in plan.get("extra", ())]
    info = write_layer([*items(files, prefix, zips), *extra], out / TAR, int(plan["epoch"]))
    for archive in zips.values():
        archive.close()
    summary = {"diff_id": info.diff_id, "size": info.size, "entries": [e.line() for e in info.entries]}
    (out / INFO).write_text(json.dumps(summary))
    return summary


def install_order(wheels: list[dict[str, str]]) -> list[dict[str, str]]:
    """pip's order with --no-deps: every requirement weighs the same in its resolver, and ties go by
    canonical name, descending (get_installation_order). So of two wheels that ship one path, the
    one whose name sorts first is installed last, and its file is the one left."""
    return sorted(wheels, key=lambda wheel: _canonical(wheel["name"]), reverse=True)


def _extra_item(spec: dict, folder: str) -> Item:  # type: ignore[type-arg]
    """An item the host added (the image manifest, CUDA links): its entry, and its bytes in a file."""
    entry = Entry(spec["path"], spec["kind"], int(spec["mode"]), int(spec["size"]), "", spec["target"])
    entry = replace(entry, uid=int(spec["uid"]), gid=int(spec["gid"]))
    data = spec.get("data")
    return Item(entry, partial(open, os.path.join(folder, data), "rb") if data else None)


def main(argv: list[str]) -> int:
    plan_path, out = Path(argv[0]), Path(argv[1])
    try:
        install(json.loads(plan_path.read_text()), out)
    except (WheelError, zipfile.BadZipFile) as exc:
        print(f"verlenv wheelstream: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
