"""Locks: the committed ones are complete and fresh; staleness is told offline; bad locks are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verlenv.cli import main
from verlenv.errors import ConfigError, ResolutionError
from verlenv.lock import resolve as lock
from verlenv.lock.lockfile import parse_lock, read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import load_profile, profile_names

# vLLM's exact torch pin per release, from its PyPI Requires-Dist (field-notes §2a).
VLLM_TORCH_PIN = {"0.8.5.post1": "2.6.0", "0.11.0": "2.8.0", "0.12.0": "2.9.0", "0.24.0": "2.11.0"}
SGLANG_TORCH_PIN = {"0.5.5": "2.8.0", "0.5.12": "2.11.0"}  # sglang's own torch== pins (PyPI metadata)


def test_five_locks_every_entry_hashed(repo_paths: ProjectPaths) -> None:
    locks = sorted(p for p in repo_paths.lockfiles.glob("*.lock") if p.stem != "build-backends")
    assert [p.stem for p in locks] == profile_names(repo_paths)
    for path in locks:
        text = path.read_text()
        parsed = parse_lock(text, path)
        assert len(parsed.dists) > 50
        assert all(d.hashes for d in parsed.dists)
        entries = [ln for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
        assert len(entries) == len(parsed.dists)
        assert all(ln.endswith("\\") for ln in entries), "an entry line without a following --hash line"


def test_each_real_lock_pins_the_torch_its_engine_requires(repo_paths: ProjectPaths) -> None:
    real = sorted(repo_paths.lockfiles.glob("verl*.lock"))
    assert len(real) == 6
    for path in real:
        parsed = read_lock(path)
        engine, pins = ("sglang", SGLANG_TORCH_PIN) if "-sglang" in path.name else ("vllm", VLLM_TORCH_PIN)
        version = parsed.version_of(engine)
        assert version in pins, path
        assert parsed.version_of("torch") == pins[version], path


def test_cpu_smoke_lock_has_cpu_torch_and_no_cuda(repo_paths: ProjectPaths) -> None:
    parsed = read_lock(repo_paths.lock("cpu-smoke"))
    assert parsed.version_of("torch") == "2.13.0+cpu"
    assert parsed.version_of("vllm") is None
    assert not [d.name for d in parsed.dists if d.name.startswith("nvidia-")]
    assert parsed.version_of("ray") and parsed.version_of("verl") == "0.9.1"


def test_check_is_fresh_on_the_committed_tree(repo_paths: ProjectPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERLENV_ROOT", str(repo_paths.root))
    assert main(["lock", "--check"]) == 0


def test_check_says_stale_after_a_profile_edit(project: ProjectPaths, capsys: pytest.CaptureFixture[str]) -> None:
    path = project.profile("verl0.6.1-vllm0.11.0-torch2.8.0-cu128")
    path.write_text(path.read_text().replace('snapshot = "2025-11-20"', 'snapshot = "2025-11-21"'))
    assert main(["lock", "--check"]) == 1
    out = capsys.readouterr()
    assert re.search(r"verl0\.6\.1-vllm0\.11\.0-torch2\.8\.0-cu128 +stale +profile .* changed", out.out)
    assert "cpu-smoke" in out.out and "1 lock(s) not fresh" in out.err


def test_check_json_reports_each_state(project: ProjectPaths, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    project.lock("cpu-smoke").unlink()
    assert main(["lock", "--check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema_version"] == 1
    states = {row["profile"]: row["state"] for row in report["locks"]}
    assert states["cpu-smoke"] == "missing"
    assert set(states.values()) == {"missing", "fresh"}


def test_hand_edited_lock_is_invalid(project: ProjectPaths) -> None:
    path = project.lock("cpu-smoke")
    text = path.read_text().replace("    --hash=sha256:", "    # --hash=sha256:", 3)
    path.write_text(text)
    [status] = lock.check(project, ["cpu-smoke"])
    assert status.state == "invalid" and "has no --hash=sha256" in status.reason


def test_parse_refuses_hashless_and_unpinned_entries(tmp_path: Path) -> None:
    header = (Path(__file__).parents[2] / "lockfiles" / "cpu-smoke.lock").read_text().split("absl-py")[0]
    with pytest.raises(ConfigError, match=r"'six==1\.16\.0' has no --hash"):
        parse_lock(header + "six==1.16.0\n", tmp_path / "x.lock")
    with pytest.raises(ConfigError, match="not pinned to one exact version"):
        parse_lock(header + "six>=1.16 \\\n    --hash=sha256:" + "0" * 64 + "\n", tmp_path / "x.lock")
    with pytest.raises(ConfigError, match="lacks profile-sha256"):
        parse_lock("# lock-schema: 1\n# profile: x\n", tmp_path / "x.lock")


def _tiny_project(project: ProjectPaths, spec: str, components: str) -> str:
    """A one-requirement profile resolved for real by uv (needs the package index)."""
    src = project.profile("cpu-smoke").read_text()
    head = src.split("[components]")[0]
    layers = "[layers]" + src.split("[layers]")[1]
    text = f'{head}[components]\n{components}\n\n[[requirements]]\nspec = "{spec}"\nwhy = "test"\n\n{layers}'
    project.profile("tiny").write_text(text)
    return "tiny"


def test_real_resolve_writes_a_hashed_lock_then_check_tracks_it(project: ProjectPaths) -> None:
    name = _tiny_project(project, "packaging==24.1", 'packaging = "24.1"')
    target = lock.resolve(load_profile(project, name), project)
    parsed = read_lock(target)
    assert [d.pin for d in parsed.dists] == ["packaging==24.1"]
    assert parsed.header.uv_version and parsed.header.platform == "x86_64-manylinux_2_36"
    assert lock.check(project, [name])[0].state == "fresh"


def test_resolve_writes_nothing_when_a_component_is_absent(project: ProjectPaths) -> None:
    name = _tiny_project(project, "packaging==24.1", 'torch = "2.6.0"')
    with pytest.raises(ResolutionError, match=r"promises torch 2\.6\.0 but uv resolved no torch"):
        lock.resolve(load_profile(project, name), project)
    assert not project.lock(name).exists()
    assert not list(project.lockfiles.glob(".*tmp"))


def test_resolve_failure_is_exit_4_with_uv_message(project: ProjectPaths, capsys: pytest.CaptureFixture[str]) -> None:
    _tiny_project(project, "packaging==0.0.0.999", 'packaging = "0.0.0.999"')
    assert main(["lock", "--profile", "tiny"]) == 4
    assert "uv pip compile for profile tiny failed" in capsys.readouterr().err
    assert not project.lock("tiny").exists()


def test_committed_verify_reports_match_their_locks_and_pass(repo_paths: ProjectPaths) -> None:
    import json

    for name in profile_names(repo_paths):
        report = json.loads((repo_paths.lockfiles / f"{name}.verify.json").read_text())
        assert report["schema_version"] == 1 and report["profile"] == name
        lock_obj = read_lock(repo_paths.lock(name))
        assert report["lock_sha256"] == lock_obj.sha256, f"{name}: verify report is stale"
        assert report["base"] == load_profile(repo_paths, name).base.name, f"{name}: base changed since verify"
        assert report["distributions"] == len(lock_obj.dists), name
        assert report["ok"] is True, name
        assert report["metadata"]["ok"] and not report["unreadable"]
        if name != "cpu-smoke":  # the engine's own compiled code was checked against torch
            engine = "sgl_kernel" if "-sglang" in name else "vllm/"
            assert any(e["path"].startswith(engine) for e in report["extensions"]), name


def test_a_cuda_build_needs_the_locks_own_nvcc(repo_paths: ProjectPaths, tmp_path: Path) -> None:
    """The torch 2.9 / CUDA 12.9 lock has torch, einops and ninja but no nvcc: flash-attn for sm_90 can't
    be built from it, and locking that says so before writing anything."""
    from dataclasses import replace

    default = load_profile(repo_paths, "verl0.9.1-vllm0.24.0-torch2.11.0-cu130")
    older = load_profile(repo_paths, "verl0.8.0-vllm0.12.0-torch2.9.0-cu129")
    without = read_lock(repo_paths.lock(older.name))
    assert without.version_of("nvidia-cuda-nvcc") is None and without.version_of("einops")
    wants = replace(older, builds=default.builds)
    target = tmp_path / "x.lock"
    with pytest.raises(ResolutionError) as info:
        lock._check_build_requires(wants, without, target)
    assert (
        "needs nvidia-cuda-nvcc; the lock has none" in info.value.message and "flash-attn==2.8.3" in info.value.message
    )
    assert "no CUDA 12 compiler is on PyPI" in (info.value.hint or "")  # its torch is CUDA 12.9's
    assert not target.exists()
    lock._check_build_requires(default, read_lock(repo_paths.lock(default.name)), target)  # it has nvcc 13.2
    sglang091 = load_profile(repo_paths, "verl0.9.1-sglang0.5.12-torch2.11.0-cu130")
    lock._check_build_requires(sglang091, read_lock(repo_paths.lock(sglang091.name)), target)  # nvcc 13.0.88
    cpp_only = replace(default.builds[0], cuda_archs=())  # a C++ extension needs no nvcc
    lock._check_build_requires(replace(older, builds=(cpp_only,)), without, target)
