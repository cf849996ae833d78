"""The Debian base's records: .deb lines, the local repository mmdebstrap installs from, and what a
mirror offers now (`verlenv base --check`), against a mirror served here from a folder."""

from __future__ import annotations

import lzma
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from verlenv.errors import CheckFailed, ConfigError
from verlenv.image import debs
from verlenv.image.base import check_mirror
from verlenv.image.debbase import recipe_hash
from verlenv.profiles.bases import load_bases

STANZA = (
    "Package: {name}\nVersion: {version}\nArchitecture: amd64\n"
    "Filename: pool/{name}_{version}_amd64.deb\nSHA256: {sha}\n"
)


def _mirror(root: Path, suite: str, packages: dict[str, str]) -> None:
    index = root / "dists" / suite / "main" / "binary-amd64"
    index.mkdir(parents=True)
    text = "\n".join(STANZA.format(name=n, version=v, sha="0" * 64) for n, v in packages.items())
    (index / "Packages.xz").write_bytes(lzma.compress(text.encode()))


@pytest.fixture
def mirror(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "mirror"
    _mirror(root, "bookworm", {"libc6": "2.36-9+deb12u10", "bash": "5.2.15-2+b2"})
    _mirror(root, "bookworm-updates", {})
    _mirror(root, "bookworm-security", {"libc6": "2.36-9+deb12u13"})

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _bases_file(tmp_path: Path, debs_lines: list[str], recipe: str = "") -> Path:
    path = tmp_path / "bases.toml"
    lines = ", ".join(f'"{line}"' for line in debs_lines)
    path.write_text(
        '[bases."b"]\nkind = "debian"\nimage = "verlenv/base-b"\npython = "3.11"\nglibc = "2.36"\n'
        f'suite = "bookworm"\npackages = ["bash"]\nrecipe = "{recipe}"\nepoch = 0\ndebs = [{lines}]\n'
    )
    if not recipe:
        base = load_bases(path)["b"]
        path.write_text(path.read_text().replace('recipe = ""', f'recipe = "{recipe_hash(base)}"'))
    return path


def test_the_newest_offer_across_suites_wins_by_dpkg_order() -> None:
    assert debs.newest(["2.36-9+deb12u10", "2.36-9+deb12u13", "2.36-9+deb12u9"]) == "2.36-9+deb12u13"
    assert debs.newest(["1:1.0-1", "2.0-1"]) == "1:1.0-1"  # the epoch outranks


def test_check_says_which_recorded_debs_the_mirror_moved_on_from(mirror: str, tmp_path: Path) -> None:
    path = _bases_file(
        tmp_path, [f"libc6 2.36-9+deb12u10 amd64 sha256:{'a' * 64}", f"bash 5.2.15-2+b2 amd64 sha256:{'b' * 64}"]
    )
    moved = _check(path, mirror)
    assert moved == ["libc6 2.36-9+deb12u10 -> 2.36-9+deb12u13"]


def _check(path: Path, mirror: str) -> list[str]:
    from unittest import mock

    from verlenv.image import debbase

    sources = [debs.Source(mirror, s) for s in ("bookworm", "bookworm-updates", "bookworm-security")]
    with mock.patch.object(debbase, "host_sources", lambda suite, m="": sources):
        return check_mirror(path, "b")


def test_a_package_gone_from_the_mirror_is_named(mirror: str, tmp_path: Path) -> None:
    path = _bases_file(tmp_path, [f"gone 1.0 amd64 sha256:{'c' * 64}"])
    assert _check(path, mirror) == ["gone 1.0 -> (gone from the mirror)"]


def test_a_changed_package_list_needs_update_not_check(mirror: str, tmp_path: Path) -> None:
    path = _bases_file(tmp_path, [f"bash 5.2.15-2+b2 amd64 sha256:{'b' * 64}"], recipe="0" * 64)
    with pytest.raises(CheckFailed, match="its package list changed"):
        _check(path, mirror)


def test_a_malformed_deb_line_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"bases\.b\.debs: 'libc6 2\.36' is not"):
        debs.Deb.parse("libc6 2.36", "bases.b.debs")


def test_the_local_repository_lists_exactly_the_recorded_debs(tmp_path: Path) -> None:
    from verlenv.wheels.cache import Cache

    control = tmp_path / "pkg" / "DEBIAN"
    control.mkdir(parents=True)
    (control / "control").write_text(
        "Package: probe\nVersion: 1.0-1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: d\n"
    )
    subprocess.run(
        ["dpkg-deb", "--build", str(tmp_path / "pkg"), str(tmp_path / "probe.deb")], check=True, capture_output=True
    )
    cache = Cache(tmp_path / "cache")
    [deb] = debs.record([tmp_path / "probe.deb"], cache)
    assert deb.line() == f"probe 1.0-1 all sha256:{deb.sha256}" and deb.filename == "probe_1.0-1_all.deb"
    repo = debs.local_repository([deb], cache, tmp_path / "repo", "bookworm")
    packages = (repo / "dists/bookworm/main/binary-amd64/Packages").read_text()
    assert (
        "Package: probe" in packages
        and f"SHA256: {deb.sha256}" in packages
        and "Filename: pool/probe_1.0-1_all.deb" in packages
    )
    assert "Suite: bookworm" in (repo / "dists/bookworm/Release").read_text()
