"""verify's ELF check on real compiled fixtures: pass, missing symbol, other ABI, missing DT_NEEDED,
GLIBC too new, weak symbols, broken ELF files; through the real `verlenv verify` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.fakeproject import make_project
from tests.helpers.fakewheels import Variant, build_pair, build_wheel
from verlenv.cli import main


def _verify(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variant: Variant,
    *,
    glibc: str = "2.36",
    extra: list[Path] = (),
) -> tuple[int, dict, str]:  # type: ignore[assignment,type-arg]
    torch, ext = build_pair(tmp_path / "build", variant)
    project = make_project(tmp_path / "project", [torch, ext, *extra], glibc=glibc)
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    code = main(["verify", "--profile", "fake", "--offline", "--cache", str(project.cache.root), "-q", "-v"])
    text = capsys.readouterr().out
    report = json.loads((project.paths.lockfiles / "fake.verify.json").read_text())
    return code, report, text


def _ext(report: dict) -> dict:  # type: ignore[type-arg]
    [ext] = [e for e in report["extensions"] if e["owner"].startswith("fakeext")]
    return ext


def test_matching_pair_passes(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, report, text = _verify(tmp_path, monkeypatch, capsys, Variant())
    assert code == 0, text
    assert report["ok"] and report["schema_version"] == 1
    ext = _ext(report)
    assert ext["ok"] and ext["abi"] == "cxx11" and ext["torch_symbols"] == 3
    assert report["torch"] == {"version": "2.6.0", "cxx11_abi": "cxx11"}
    assert "OK    fakeext 1.0  fakeext/_C.so" in text and "result: PASS" in text


def test_weak_undefined_symbol_is_ignored(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # c10::optional_hook() is referenced weakly and torch does not export it: still a pass.
    code, report, _ = _verify(tmp_path, monkeypatch, capsys, Variant())
    assert code == 0
    assert not any("optional_hook" in x for f in _ext(report)["findings"] for x in f["examples"])


def test_library_missing_one_symbol_fails_and_names_it(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, report, text = _verify(tmp_path, monkeypatch, capsys, Variant(torch_has_mul=False))
    assert code == 1 and not report["ok"]
    [finding] = _ext(report)["findings"]
    assert finding["kind"] == "missing-symbols" and finding["count"] == 1
    assert finding["examples"] == ["at::mul(int, int)"]
    assert "at::mul(int, int)" in text and "result: FAIL" in text
    assert "rebuild fakeext against torch 2.6.0" in finding["fix"]


def test_other_cxx_abi_fails_and_names_the_abi(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, report, _text = _verify(tmp_path, monkeypatch, capsys, Variant(ext_abi=0))
    assert code == 1
    kinds = {f["kind"]: f for f in _ext(report)["findings"]}
    assert set(kinds) == {"missing-symbols", "abi-mismatch"}
    assert "c10::Error::Error(c10::SourceLocation, std::string)" in kinds["missing-symbols"]["examples"]
    assert kinds["abi-mismatch"]["message"] == "built with the pre-cxx11 C++ string ABI; torch 2.6.0 uses cxx11"
    assert "cxx11abiTRUE" in kinds["abi-mismatch"]["fix"]


def test_torch_with_old_abi_against_new_extension(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, report, _ = _verify(tmp_path, monkeypatch, capsys, Variant(torch_abi=0, ext_abi=1))
    assert code == 1 and report["torch"]["cxx11_abi"] == "pre-cxx11"
    assert "abi-mismatch" in {f["kind"] for f in _ext(report)["findings"]}


def test_missing_dt_needed_fails(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, report, _ = _verify(tmp_path, monkeypatch, capsys, Variant(ext_needs_missing_lib=True))
    assert code == 1
    [finding] = _ext(report)["findings"]
    assert finding["kind"] == "missing-needed" and finding["examples"] == ["libvendor_missing.so"]


def test_dt_needed_shipped_by_another_wheel_is_fine(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # The same missing library, now shipped in an nvidia-style wheel: resolved by file name.
    build = tmp_path / "vendor"
    build.mkdir()
    torch, ext = build_pair(tmp_path / "b0", Variant(ext_needs_missing_lib=True))
    vendor = build_wheel(
        build,
        "nvidia_vendor",
        "1.0",
        {"nvidia/vendor/lib/libvendor_missing.so": (tmp_path / "b0" / "libvendor_missing.so").read_bytes()},
    )
    project = make_project(tmp_path / "p", [torch, ext, vendor])
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    assert main(["verify", "--profile", "fake", "--offline", "--cache", str(project.cache.root), "-q"]) == 0


def test_glibc_newer_than_the_base_fails(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, report, _ = _verify(tmp_path, monkeypatch, capsys, Variant(ext_uses_pthread=True), glibc="2.31")
    assert code == 1
    [finding] = _ext(report)["findings"]
    assert finding["kind"] == "glibc-too-new" and finding["examples"] == ["GLIBC_2.34"]
    assert "GLIBC 2.31" in finding["message"]


def test_same_binary_on_a_new_enough_base_passes(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, _ = _verify(tmp_path, monkeypatch, capsys, Variant(ext_uses_pthread=True), glibc="2.36")
    assert code == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"this is a text file, not a library\n", "not an ELF file (bad magic number)"),
        (b"\x7fELF" + b"\x02\x01\x01" + b"\x00" * 9 + b"garbage" * 3, "not a readable ELF shared object"),
    ],
)
def test_broken_shared_objects_are_reported_not_raised(tmp_path, monkeypatch, capsys, content, expected) -> None:  # type: ignore[no-untyped-def]
    bad = build_wheel(tmp_path, "brokenpkg", "1.0", {"brokenpkg/_native.so": content})
    code, report, text = _verify(tmp_path, monkeypatch, capsys, Variant(), extra=[bad])
    assert code == 1 and "Traceback" not in text
    [entry] = report["unreadable"]
    assert entry["path"] == "brokenpkg/_native.so" and expected in entry["error"]


@pytest.mark.parametrize(
    "script",
    [b"INPUT(-l:libcuda.so.1)\n", b"/* GNU ld script */\nOUTPUT_FORMAT(elf64-x86-64)\nGROUP ( /lib/libc.so.6 )\n"],
)
def test_a_linker_script_named_like_a_library_is_no_finding(tmp_path, monkeypatch, capsys, script) -> None:  # type: ignore[no-untyped-def]
    # verlenv's own stubs/libcuda.so (and glibc's libc.so) are ld scripts: the loader never maps them
    ok = build_wheel(tmp_path, "stubpkg", "1.0", {"stubpkg/lib/stubs/libcuda.so": script})
    code, report, text = _verify(tmp_path, monkeypatch, capsys, Variant(), extra=[ok])
    assert code == 0, text
    assert report["unreadable"] == []


def test_truncated_real_library_is_reported(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    _torch, _ = build_pair(tmp_path / "b1", Variant())
    real = (tmp_path / "b1" / "libc10.so").read_bytes()
    bad = build_wheel(tmp_path, "brokenpkg", "1.0", {"brokenpkg/_trunc.so": real[: len(real) // 3]})
    code, report, _ = _verify(tmp_path, monkeypatch, capsys, Variant(), extra=[bad])
    assert code == 1
    assert report["unreadable"][0]["path"] == "brokenpkg/_trunc.so"


def test_symbol_tables_are_cached_by_wheel_hash(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    torch, ext = build_pair(tmp_path / "build", Variant())
    project = make_project(tmp_path / "project", [torch, ext])
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    args = ["verify", "--profile", "fake", "--offline", "--cache", str(project.cache.root), "-q", "--json"]
    assert main(args) == 0
    cached = sorted(p.name for p in (project.cache.root / "elf").iterdir())
    assert len(cached) == 2 and all(name.endswith(".json.gz") for name in cached)
    first = json.loads(capsys.readouterr().out)["report"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["report"] == first


def test_verify_refuses_a_stale_lock(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    torch, ext = build_pair(tmp_path / "build", Variant())
    project = make_project(tmp_path / "project", [torch, ext])
    profile = project.paths.profile("fake")
    profile.write_text(profile.read_text().replace('snapshot = "2026-01-01"', 'snapshot = "2026-01-02"'))
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    assert main(["verify", "--profile", "fake", "--offline", "--cache", str(project.cache.root)]) == 1
    assert "lock for fake is stale" in capsys.readouterr().err
    assert not (project.paths.lockfiles / "fake.verify.json").exists()


def test_check_committed_compares_with_the_written_report(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    torch, ext = build_pair(tmp_path / "build", Variant())
    project = make_project(tmp_path / "project", [torch, ext])
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    base = ["verify", "--profile", "fake", "--offline", "--cache", str(project.cache.root), "-q"]
    assert main(base) == 0
    assert main([*base, "--check-committed"]) == 0
    report = project.paths.lockfiles / "fake.verify.json"
    report.write_text(report.read_text().replace('"distributions": 2', '"distributions": 3'))
    assert main([*base, "--check-committed"]) == 1
    assert "does not match this run's report" in capsys.readouterr().err


def test_metadata_violation_fails_verify(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    torch, _ = build_pair(tmp_path / "build", Variant())
    needy = build_wheel(tmp_path, "needy", "1.0", {"needy/__init__.py": b""}, requires=["torch==2.7.0", "absent>=1"])
    project = make_project(tmp_path / "project", [torch, needy])
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    assert main(["verify", "--profile", "fake", "--offline", "--cache", str(project.cache.root), "-q", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)["report"]
    problems = {(v["requirement"], v["problem"]) for v in report["metadata"]["violations"]}
    assert problems == {("torch==2.7.0", "the lock has torch 2.6.0"), ("absent>=1", "not in the lock")}


def test_try_a_release_built_for_another_torch_fails_naming_the_symbols(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # What `verlenv verify --try sgl-kernel==0.3.21` showed for real (benchmarks/results): a release built
    # for another torch, swapped in for the locked one, fails with the symbols it misses; nothing is written.
    import zipfile

    from tests.helpers.localindex import serve

    torch, ext = build_pair(tmp_path / "good", Variant())
    _, old_abi = build_pair(tmp_path / "other", Variant(ext_abi=0))  # the same extension, other string ABI
    index = tmp_path / "index"
    index.mkdir()
    with zipfile.ZipFile(old_abi) as source:
        members = {n: source.read(n) for n in source.namelist() if not n.startswith("fakeext-1.0.dist-info")}
    build_wheel(index, "fakeext", "2.0", members, requires=["torch==2.6.0"])
    project = make_project(tmp_path / "project", [torch, ext])
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    with serve(index) as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        code = main(["verify", "--profile", "fake", "--cache", str(project.cache.root), "-q", "--try", "fakeext==2.0"])
    out = capsys.readouterr().out
    assert code == 1 and "what if: fakeext==2.0" in out
    assert "FAIL  fakeext 2.0  fakeext/_C.so" in out and "c10::Error::Error(c10::SourceLocation, std::string)" in out
    assert "abi-mismatch" in out
    assert not (project.paths.lockfiles / "fake.verify.json").exists()  # a what-if never writes the report


def test_try_another_torch_names_the_torch_it_checked(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # `verify --profile verl0.6.1-vllm0.11.0-torch2.8.0-cu128 --try torch==2.9.0` read 2.9.0's libraries but
    # said "torch 2.8.0" and "rebuild vllm against torch 2.8.0": the words must follow the torch that was read.
    import zipfile

    from tests.helpers.localindex import serve

    torch, ext = build_pair(tmp_path / "good", Variant())  # fakeext 1.0 pins torch==2.6.0
    newer, _ = build_pair(tmp_path / "newer", Variant(torch_has_mul=False))  # a torch that dropped at::mul
    index = tmp_path / "index"
    index.mkdir()
    with zipfile.ZipFile(newer) as source:
        members = {n: source.read(n) for n in source.namelist() if not n.startswith("torch-2.6.0.dist-info")}
    build_wheel(index, "torch", "2.7.0", members)
    project = make_project(tmp_path / "project", [torch, ext])
    monkeypatch.setenv("VERLENV_ROOT", str(project.paths.root))
    with serve(index) as (url, _):
        monkeypatch.setenv("VERLENV_INDEX_URL", url)
        code = main(["verify", "--profile", "fake", "--cache", str(project.cache.root), "-q", "--try", "torch==2.7.0"])
    out = capsys.readouterr().out
    assert code == 1
    assert "elf: torch 2.7.0 (cxx11 ABI; in place of the lock's 2.6.0)" in out
    assert "1 symbol(s) not exported by torch 2.7.0's libraries" in out and "at::mul(int, int)" in out
    assert (
        "fix: fakeext 1.0 was built for torch 2.6.0 (its Requires-Dist pins torch==2.6.0) and torch 2.7.0 lacks "
        "these symbols: keep the lock's torch 2.6.0, or take a fakeext built for torch 2.7.0"
    ) in out
    assert "fakeext requires torch==2.6.0: torch 2.7.0 is checked in place of the lock's 2.6.0" in out
    assert "torch 2.6.0's libraries" not in out and "rebuild fakeext" not in out
