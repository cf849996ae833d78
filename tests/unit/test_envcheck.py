"""The ELF engine over an installed site-packages (what doctor runs inside containers)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.helpers.fakewheels import Variant, build_pair
from verlenv.inside.envcheck import check_site
from verlenv.profiles.bases import BaseFacts

BASE = BaseFacts(frozenset({"libc.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6"}), "2.36", "3.4.30")


def _install(site: Path, *wheels: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)


def test_installed_matching_pair_passes(tmp_path: Path) -> None:
    _install(tmp_path / "site", *build_pair(tmp_path / "b", Variant()))
    report = check_site(tmp_path / "site", BASE)
    assert report.ok and report.torch is not None and report.torch.version == "2.6.0"
    [verdict] = report.verdicts
    assert verdict.owner == "fakeext 1.0" and verdict.path == "fakeext/_C.so"


def test_installed_extension_needing_a_missing_symbol_fails(tmp_path: Path) -> None:
    _install(tmp_path / "site", *build_pair(tmp_path / "b", Variant(torch_has_mul=False)))
    report = check_site(tmp_path / "site", BASE)
    assert not report.ok
    [finding] = report.verdicts[0].findings
    assert finding.examples == ("at::mul(int, int)",)


def test_a_broken_installed_object_is_an_error_not_a_crash(tmp_path: Path) -> None:
    _install(tmp_path / "site", *build_pair(tmp_path / "b", Variant()))
    (tmp_path / "site" / "fakeext" / "_broken.so").write_bytes(b"\x7fELFnot really")
    report = check_site(tmp_path / "site", BASE)
    [error] = report.errors
    assert error.path == "fakeext/_broken.so" and error.owner == "fakeext 1.0"


def test_symlinks_out_of_the_environment_are_not_followed(tmp_path: Path) -> None:
    _install(tmp_path / "site", *build_pair(tmp_path / "b", Variant()))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.so").write_bytes(b"garbage")
    (tmp_path / "site" / "linked").symlink_to(outside)
    (tmp_path / "site" / "fakeext" / "alias.so").symlink_to(outside / "evil.so")
    assert check_site(tmp_path / "site", BASE).ok
