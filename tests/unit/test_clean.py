"""clean on real environments broken the way real ones break, plus a property test of --apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.fakewheels import build_wheel
from tests.helpers.venvs import Venv, make_venv
from verlenv.inside import clean
from verlenv.inside.installed import forget


@pytest.fixture
def venv(tmp_path: Path) -> Venv:
    return make_venv(tmp_path / "venv")


def _pkg(tmp: Path, version: str, files: dict[str, bytes]) -> Path:
    folder = tmp / f"wheels-{version}"
    folder.mkdir(exist_ok=True)
    return build_wheel(folder, "enginepkg", version, files)


def _kinds(site: Path) -> dict[str, set[str]]:
    forget(site)
    found: dict[str, set[str]] = {}
    for item in clean.find_stale(site):
        found.setdefault(item.kind, set()).add(item.path.relative_to(site).as_posix())
    return found


def test_in_place_upgrade_leaves_unrecorded_files(tmp_path: Path, venv: Venv) -> None:
    old = _pkg(
        tmp_path,
        "1.0",
        {
            "enginepkg/__init__.py": b"v = 1",
            "enginepkg/vllm_flash_attn/_old_C.so": b"\x7fELF",
            "enginepkg/legacy.py": b"",
        },
    )
    new = _pkg(tmp_path, "2.0", {"enginepkg/__init__.py": b"v = 2"})
    venv.pip(str(old))
    for info in venv.site.glob("enginepkg-1.0.dist-info"):  # metadata lost (crashed uninstall, manual copy)
        for f in info.iterdir():
            f.unlink()
        info.rmdir()
    venv.pip(str(new))
    found = _kinds(venv.site)
    assert found["unrecorded"] == {"enginepkg/vllm_flash_attn/_old_C.so", "enginepkg/legacy.py"}
    item = next(s for s in clean.find_stale(venv.site) if s.kind == "unrecorded")
    assert "not in the RECORD of enginepkg 2.0" in item.reason


def test_files_the_manifest_declares_count_as_recorded_only_while_they_match(tmp_path: Path, venv: Venv) -> None:
    """The CUDA link entries verlenv adds below nvidia/cu13 (libcudart.so, stubs/libcuda.so) belong to no
    RECORD: the first CUDA image build with them failed its own self-check on them."""
    import hashlib

    from verlenv.image.build import LIBCUDA_SCRIPT, cuda_link_entries

    venv.pip(str(_pkg(tmp_path, "1.0", {"enginepkg/__init__.py": b"v = 1", "enginepkg/lib/libcudart.so.13": b"x"})))
    lib = venv.site / "enginepkg" / "lib"
    (lib / "stubs").mkdir()
    (lib / "stubs" / "libcuda.so").write_bytes(LIBCUDA_SCRIPT)
    (lib / "libcudart.so").symlink_to("libcudart.so.13")
    home = str(venv.site.resolve() / "enginepkg").lstrip("/")
    declared = {
        "/" + i.entry.path: f"sha256:{i.entry.sha256}" if i.entry.sha256 else f"symlink:{i.entry.target}"
        for i in cuda_link_entries(home, "13")
        if i.entry.path.endswith((".so",))
    }
    assert declared[f"/{home}/lib/stubs/libcuda.so"] == "sha256:" + hashlib.sha256(LIBCUDA_SCRIPT).hexdigest()
    unrecorded = {"enginepkg/lib/libcudart.so", "enginepkg/lib/stubs/libcuda.so"}
    assert _kinds(venv.site)["unrecorded"] == unrecorded  # undeclared: flagged
    forget(venv.site)
    assert clean.find_stale(venv.site, added=declared) == []
    (lib / "stubs" / "libcuda.so").write_bytes(b"INPUT(-l:libcuda.so.2)\n")  # no longer what was declared
    (lib / "libcudart.so").unlink()
    (lib / "libcudart.so").symlink_to("/elsewhere/libcudart.so.12")
    forget(venv.site)
    found = {s.path.relative_to(venv.site).as_posix() for s in clean.find_stale(venv.site, added=declared)}
    assert found == unrecorded


def test_two_dist_infos_for_one_name(tmp_path: Path, venv: Venv) -> None:
    venv.pip(str(_pkg(tmp_path, "1.0", {"enginepkg/__init__.py": b"v = 1"})))
    venv.pip("--ignore-installed", str(_pkg(tmp_path, "2.0", {"enginepkg/__init__.py": b"v = 2"})))
    found = _kinds(venv.site)
    assert found["duplicate-dist-info"] == {"enginepkg-1.0.dist-info"}  # 2.0's RECORD matches the files
    removed = clean.apply(clean.find_stale(venv.site), venv.site, {})
    assert [p.name for p in removed] == ["enginepkg-1.0.dist-info"]
    assert (venv.site / "enginepkg" / "__init__.py").read_text() == "v = 2"
    assert _kinds(venv.site) == {}


def test_pth_shadowing_an_installed_package(tmp_path: Path, venv: Venv) -> None:
    venv.pip(str(_pkg(tmp_path, "2.0", {"enginepkg/__init__.py": b"v = 2"})))
    checkout = tmp_path / "checkout"
    (checkout / "enginepkg").mkdir(parents=True)
    (checkout / "enginepkg" / "__init__.py").write_text("v = 'dev'")
    (venv.site / "dev-enginepkg.pth").write_text(f"{checkout}\n")
    assert _kinds(venv.site)["shadowing-pth"] == {"dev-enginepkg.pth"}


def test_a_shared_data_folder_on_a_pth_path_shadows_nothing(tmp_path: Path, venv: Venv) -> None:
    # seen on the H200: a venv reusing another's packages puts their 'include' folder (headers) on
    # a .pth path while a wheel installed here ships an 'include' too; no import changes
    venv.pip(str(_pkg(tmp_path, "2.0", {"enginepkg/__init__.py": b"v = 2", "include/engine.h": b"//"})))
    lent = tmp_path / "lent"
    (lent / "include").mkdir(parents=True)
    (lent / "include" / "other.h").write_text("//")
    (venv.site / "verlenv-reused.pth").write_text(f"{lent}\n")
    assert "shadowing-pth" not in _kinds(venv.site)
    (lent / "include" / "__init__.py").write_text("")  # now it is a package, and it does shadow
    assert _kinds(venv.site)["shadowing-pth"] == {"verlenv-reused.pth"}


def test_orphan_bytecode(tmp_path: Path, venv: Venv) -> None:
    venv.pip(str(_pkg(tmp_path, "2.0", {"enginepkg/__init__.py": b"v = 2"})))
    cache = venv.site / "enginepkg" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "__init__.cpython-311.pyc").write_bytes(b"ok: its source exists")
    (cache / "removed.cpython-311.pyc").write_bytes(b"orphan")
    assert _kinds(venv.site) == {"orphan-bytecode": {"enginepkg/__pycache__/removed.cpython-311.pyc"}}


def test_cache_written_by_other_versions(tmp_path: Path) -> None:
    vllm_cache, flashinfer = tmp_path / "vllm", tmp_path / "flashinfer"
    clean.write_stamp(vllm_cache, {"torch": "2.5.1", "vllm": "0.7.3"})
    (flashinfer / "0.2.2").mkdir(parents=True)
    (flashinfer / "0.3.1").mkdir(parents=True)
    found = clean.find_stale(
        tmp_path / "empty-site",
        {"vllm": vllm_cache, "flashinfer": flashinfer},
        {"torch": "2.8.0", "vllm": "0.11.0", "flashinfer-python": "0.3.1"},
    )
    reasons = {s.path.name: s.reason for s in found}
    assert "torch 2.5.1 -> 2.8.0" in reasons["vllm"] and "vllm 0.7.3 -> 0.11.0" in reasons["vllm"]
    assert set(reasons) == {"vllm", "0.2.2"}


def test_sglang_caches_written_by_other_versions(tmp_path: Path) -> None:
    # SGLang keeps FlashInfer autotune results by FlashInfer version, and DeepGEMM JIT kernels
    sglang, deep_gemm = tmp_path / "sglang", tmp_path / "deep_gemm"
    (sglang / "flashinfer" / "autotune" / "0.5.0" / "sm90").mkdir(parents=True)
    (sglang / "flashinfer" / "autotune" / "0.6.11.post1" / "sm90").mkdir(parents=True)
    clean.write_stamp(deep_gemm, {"sglang": "0.5.5", "sgl-deep-gemm": "", "torch": "2.8.0"})
    versions = {"torch": "2.11.0", "sglang": "0.5.12", "sgl-deep-gemm": "0.1.0", "flashinfer-python": "0.6.11.post1"}
    found = clean.find_stale(tmp_path / "empty-site", {"sglang": sglang, "deep_gemm": deep_gemm}, versions)
    reasons = {s.path.name: s.reason for s in found}
    assert set(reasons) == {"0.5.0", "deep_gemm"}
    assert "flashinfer 0.5.0; installed is 0.6.11.post1" in reasons["0.5.0"]
    assert "sglang 0.5.5 -> 0.5.12" in reasons["deep_gemm"] and "torch 2.8.0 -> 2.11.0" in reasons["deep_gemm"]
    assert set(clean.default_cache_roots()) >= {"sglang", "deep_gemm", "vllm", "flashinfer", "triton"}


def test_cli_check_json_and_apply(tmp_path: Path, venv: Venv) -> None:
    old = _pkg(tmp_path, "1.0", {"enginepkg/__init__.py": b"", "enginepkg/stale.py": b""})
    venv.pip(str(old))
    (venv.site / "enginepkg-1.0.dist-info" / "RECORD").write_text("enginepkg/__init__.py,,\n")
    proc = venv.verlenv("clean", "--check", "--json", "--no-caches")
    assert proc.returncode == 1, proc.stderr
    found = {(f["kind"], f["path"].split("site-packages/")[1]) for f in json.loads(proc.stdout)["found"]}
    assert found == {
        ("unrecorded", "enginepkg/stale.py"),
        ("orphan-bytecode", "enginepkg/__pycache__/stale.cpython-311.pyc"),
    }
    assert venv.verlenv("clean", "--apply", "--no-caches").returncode == 0
    assert not (venv.site / "enginepkg" / "stale.py").exists()
    assert (venv.site / "enginepkg" / "__init__.py").exists()
    assert venv.verlenv("clean", "--check", "--no-caches").returncode == 0


names = st.text(alphabet="abcdefgh", min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    recorded=st.sets(names, min_size=1, max_size=8),
    extra=st.sets(names, max_size=8),
    nested=st.booleans(),
    link_out=st.booleans(),
)
def test_apply_removes_exactly_the_unrecorded_files(tmp_path_factory, recorded, extra, nested, link_out) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path_factory.mktemp("site")
    outside = tmp_path_factory.mktemp("outside")
    (outside / "precious.txt").write_text("keep")
    sub = "pkg/sub/" if nested else "pkg/"
    record_lines = []
    for name in recorded:
        path = site / f"{sub}{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        record_lines.append(f"{sub}{name}.py,,")
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n\n")
    (info / "RECORD").write_text(
        "\n".join([*record_lines, "pkg-1.0.dist-info/METADATA,,", "pkg-1.0.dist-info/RECORD,,"])
    )
    strays = {f"pkg/stray_{n}.dat" for n in extra}
    for rel in strays:
        (site / rel).write_text("stray")
    if link_out:
        (site / "pkg" / "linked_dir").symlink_to(outside)
        (site / "pkg" / "linked_file.dat").symlink_to(outside / "precious.txt")
    forget(site)
    found = clean.find_stale(site)
    clean.apply(found, site, {})
    for name in recorded:
        assert (site / f"{sub}{name}.py").exists()
    for rel in strays:
        assert not (site / rel).exists()
    assert (outside / "precious.txt").read_text() == "keep"
    assert (info / "RECORD").exists()


def test_the_self_check_s_clean_finds_what_doctor_s_stale_check_would(tmp_path: Path, venv: Venv) -> None:
    # the build's self-check skips doctor's stale-artifacts and fails on `clean --check` instead: one scan
    import subprocess
    import sys

    from verlenv.image.build import SELF_CHECK
    from verlenv.inside.doctor.checks_binary import check_stale
    from verlenv.inside.doctor.model import Facts, Status

    assert "verlenv clean --check" in SELF_CHECK and "--skip stale-artifacts" in SELF_CHECK
    venv.pip(str(_pkg(tmp_path, "2.0", {"enginepkg/__init__.py": b"v = 2"})))
    (venv.site / "enginepkg" / "_old_C.so").write_bytes(b"\x7fELF")
    forget(venv.site)
    doctor = check_stale(Facts(site=venv.site, manifest_file=tmp_path / "no-manifest.json"))
    assert doctor.status is Status.WARN and any("enginepkg/_old_C.so" in d for d in doctor.details)
    said = subprocess.run(
        [sys.executable, "-m", "verlenv", "clean", "--check", "--no-caches", "--json", "--site", str(venv.site)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert said.returncode == 1  # fails the build where doctor only warns
    found = {(f["kind"], f["path"]) for f in json.loads(said.stdout)["found"]}
    assert found == {(s.split(": ")[0], s.split(": ")[1]) for s in doctor.details}
