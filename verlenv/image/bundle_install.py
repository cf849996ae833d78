"""Install a verlenv bundle: check every part, reassemble the wheels, then make the venv.

Standard library only, Python >= 3.8: `verlenv bundle` copies this file into the bundle as
install.py, so an air-gapped machine needs nothing but a Python to run it:

    python3 install.py VENV [--check] [verlenv venv options, e.g. --reuse-from PYTHON]

Every part is checked against its sha256 in bundle.json before anything is read from it, and every
wheel after reassembly; a mismatch names the file and both hashes, exits 6 and installs nothing.
Then verlenv, packaging and pyelftools are imported from their (checked) wheels and `verlenv venv`
does the rest, so a bundle and a checkout make their venvs with the same code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

MANIFEST = "bundle.json"
PARTS = "parts"
FORMAT = "verlenv-bundle-1"
EXIT_USAGE = 2
EXIT_INTEGRITY = 6
CHUNK = 1 << 20
BOOTSTRAP = ("verlenv", "packaging", "pyelftools")  # imported from their wheels to run `verlenv venv`


class BundleError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_manifest(bundle: Path) -> dict:  # type: ignore[type-arg]
    path = bundle / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(f"{path}: not found; is {bundle} a verlenv bundle?", EXIT_USAGE) from None
    except ValueError as exc:
        raise BundleError(f"{path}: not valid JSON ({exc})", EXIT_USAGE) from None
    if data.get("format") != FORMAT:
        raise BundleError(f"{path}: format {data.get('format')!r}, this installer reads {FORMAT}", EXIT_USAGE)
    return data


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_parts(bundle: Path, manifest: dict) -> None:  # type: ignore[type-arg]
    """Every part present with its recorded size and sha256, or BundleError (exit 6) naming it."""
    for part in manifest["parts"]:
        path = bundle / PARTS / part["name"]
        if not path.is_file():
            raise BundleError(f"part {PARTS}/{part['name']} is missing; nothing was installed", EXIT_INTEGRITY)
        actual = sha256_of(path)
        if actual != part["sha256"] or path.stat().st_size != part["size"]:
            raise BundleError(
                f"part {PARTS}/{part['name']}: sha256 {actual}, bundle.json says {part['sha256']} "
                "(damaged or altered in transit); nothing was installed",
                EXIT_INTEGRITY,
            )


class _Joined:
    """The parts read back to back as one stream (tarfile reads it in stream mode)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths, self.handle = list(paths), None

    def read(self, size: int = -1) -> bytes:
        while self.paths or self.handle:
            if self.handle is None:
                self.handle = self.paths.pop(0).open("rb")
            data = self.handle.read(size)
            if data:
                return data
            self.handle.close()
            self.handle = None
        return b""


def reassemble(bundle: Path, manifest: dict, into: Path) -> None:  # type: ignore[type-arg]
    """Unpack the wheels into ``into``, each checked against its sha256 in bundle.json."""
    wanted = {w["filename"]: w["sha256"] for w in manifest["wheels"]}
    seen = set()
    with tarfile.open(fileobj=_Joined([bundle / PARTS / p["name"] for p in manifest["parts"]]), mode="r|") as tar:
        for member in tar:
            if not member.isfile() or "/" in member.name or member.name not in wanted:
                raise BundleError(f"unexpected entry {member.name!r} in the bundle; nothing was installed", 6)
            digest = _copy(tar.extractfile(member), into / member.name)
            if digest.hexdigest() != wanted[member.name]:
                raise BundleError(
                    f"{member.name}: sha256 {digest.hexdigest()}, bundle.json says {wanted[member.name]}; "
                    "nothing was installed",
                    EXIT_INTEGRITY,
                )
            seen.add(member.name)
    missing = sorted(set(wanted) - seen)
    if missing:
        raise BundleError(f"the parts hold no {', '.join(missing[:5])}; nothing was installed", EXIT_INTEGRITY)


def _copy(source, target: Path):  # type: ignore[no-untyped-def]
    digest = hashlib.sha256()
    with target.open("wb") as out:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return digest


def _bootstrap(manifest: dict, wheelhouse: Path) -> None:  # type: ignore[type-arg]
    """Put verlenv and its core dependencies on sys.path straight from their wheels (zip imports)."""
    by_name = {w["name"]: w["filename"] for w in manifest["wheels"]}
    sys.path[:0] = [str(wheelhouse / by_name[name]) for name in BOOTSTRAP]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    bundle = Path(__file__).resolve().parent
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else EXIT_USAGE
    check_only = "--check" in args
    args = [a for a in args if a != "--check"]
    try:
        manifest = read_manifest(bundle)
        check_parts(bundle, manifest)
        print(f"[install] {len(manifest['parts'])} part(s) match bundle.json", file=sys.stderr)
        if check_only:
            return 0
        wheelhouse = Path(tempfile.mkdtemp(prefix="verlenv-bundle-"))
        try:
            reassemble(bundle, manifest, wheelhouse)
            _bootstrap(manifest, wheelhouse)
            from verlenv.cli import main as verlenv_main

            return verlenv_main(["venv", "--bundle", str(bundle), "--wheelhouse", str(wheelhouse), *args])
        finally:
            shutil.rmtree(wheelhouse, ignore_errors=True)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
