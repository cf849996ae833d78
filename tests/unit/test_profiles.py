"""Profiles: the committed ones load; malformed ones fail with file, key and a suggestion."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verlenv.cli import main
from verlenv.errors import ConfigError
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import LAYER_ORDER, default_profile, load_all, load_profile

# name -> (verl, engine, engine version, torch, CUDA)
REAL = {
    "verl0.9.1-vllm0.24.0-torch2.11.0-cu130": ("0.9.1", "vllm", "0.24.0", "2.11.0", "13.0"),
    "verl0.8.0-vllm0.12.0-torch2.9.0-cu129": ("0.8.0", "vllm", "0.12.0", "2.9.0", "12.9"),
    "verl0.6.1-vllm0.11.0-torch2.8.0-cu128": ("0.6.1", "vllm", "0.11.0", "2.8.0", "12.8"),
    "verl0.5.0-vllm0.8.5.post1-torch2.6.0-cu124": ("0.5.0", "vllm", "0.8.5.post1", "2.6.0", "12.4"),
    "verl0.9.1-sglang0.5.12-torch2.11.0-cu130": ("0.9.1", "sglang", "0.5.12", "2.11.0", "13.0"),
    "verl0.6.1-sglang0.5.5-torch2.8.0-cu128": ("0.6.1", "sglang", "0.5.5", "2.8.0", "12.8"),
}


def test_the_profiles_load(repo_paths: ProjectPaths) -> None:
    names = {p.name for p in load_all(repo_paths)}
    assert names == {*REAL, "cpu-smoke"}
    assert default_profile(repo_paths) == "verl0.9.1-vllm0.24.0-torch2.11.0-cu130"


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_profile_components_match_its_name(repo_paths: ProjectPaths, name: str) -> None:
    profile = load_profile(repo_paths, name)
    verl, engine, version, torch, cuda = REAL[name]
    assert profile.engine == engine and f"{engine}{version}" in name
    assert (profile.component("verl"), profile.component(engine), profile.component("torch")) == (verl, version, torch)
    assert profile.cuda == cuda
    assert profile.python == "3.11" and profile.platform == "x86_64-manylinux_2_36"
    assert profile.base.facts.glibc == "2.36"
    assert all(r.why.strip() for r in profile.requirements)


def test_cpu_smoke_gets_torch_through_pip_not_a_machine_path(repo_paths: ProjectPaths) -> None:
    profile = load_profile(repo_paths, "cpu-smoke")
    assert profile.sources.pip_download == ("torch==2.13.0+cpu",)
    assert not profile.sources.find_links
    assert profile.component("vllm") is None and profile.is_cpu
    text = profile.path.read_text()
    assert not re.search(r"(^|[\s\"'])/(opt|home|root|tmp|var)/", text), "a machine path leaked into the profile"


def test_layers_follow_the_declared_order(repo_paths: ProjectPaths) -> None:
    profile = load_profile(repo_paths, "verl0.9.1-vllm0.24.0-torch2.11.0-cu130")
    got = {
        n: profile.layer_of(n)
        for n in ("torch", "nvidia-cudnn-cu13", "Flashinfer_Python", "vllm", "numpy", "verl", "verlenv")
    }
    assert got == {
        "torch": "torch",
        "nvidia-cudnn-cu13": "torch",
        "Flashinfer_Python": "engine",
        "vllm": "engine",
        "numpy": "deps",
        "verl": "verl",
        "verlenv": "verlenv",
    }
    assert LAYER_ORDER == ("torch", "torch-extras", "engine", "deps", "verl", "verlenv")


def test_lock_inputs_hash_ignores_prose_but_not_pins(project: ProjectPaths) -> None:
    path = project.profile("cpu-smoke")
    before = load_profile(project, "cpu-smoke").sha256()
    path.write_text(path.read_text().replace("CPU-only smoke profile", "CPU smoke profile (reworded)"))
    assert load_profile(project, "cpu-smoke").sha256() == before
    path.write_text(path.read_text().replace('spec = "peft"', 'spec = "peft>=0.10"'))
    assert load_profile(project, "cpu-smoke").sha256() != before


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"fixture text {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


BAD = [
    # (old, new, expected key in message, expected hint fragment)
    ('python = "3.11"', 'python = "3.11"\npyhton_tag = "cp311"', "pyhton_tag", "did you mean 'python'"),
    ('cuda = "none"', 'cuda = "none"\nCuda_Version = "12"', "Cuda_Version", "did you mean 'cuda'"),
    (
        'snapshot = "2026-09-25"',
        'snapshot = "2026-09-25"\nSnapshot_Why = "x"',
        "Snapshot_Why",
        "did you mean 'snapshot_why'",
    ),
    ('torch = "2.13.0+cpu"', "torch = 2.7", "components.torch", "quote it"),
    ('base = "debian12-python3.11"', 'base = "debian12-python3.12"', "'base'", "did you mean 'debian12-python3.11'"),
    ('base = "debian12-python3.11"\n', "", "missing required key 'base'", ""),
    ('python = "3.11"', "python = 3.11", "'python' must be a string", "quoted string"),
    ('python = "3.11"', 'python = "3.12"', "base 'debian12-python3.11' provides Python 3.11", ""),
    ('spec = "peft"', 'spec = "peft==1.0,<0.5"', "requirements[5].spec", "never be satisfied"),
    ('spec = "peft"', 'spec = "peft @@ 1"', "requirements[5].spec", "not a valid requirement"),
    ('torch = "2.13.0+cpu"', 'torch = "2.7.0"', "components.torch", "contradicts"),
    ('torch = "2.13.0+cpu"', 'torch = "two"', "components.torch", "not a valid version"),
    ('snapshot = "2026-09-25"', 'snapshot = "2099-01-01"', "'snapshot'", "future"),
    ('platform = "x86_64-manylinux_2_36"', 'platform = "linux"', "'platform'", "manylinux_2_36"),
    ('why = "the acceptance suite\'s LoRA variant"', 'why = "  "', "requirements[5].why", "empty"),
    ('verl = ["verl"]', 'verl = ["verl"]\nmodels = ["x"]', "layers.models", "allowed keys"),
]


@pytest.mark.parametrize(("old", "new", "key", "hint"), BAD, ids=[b[2] for b in BAD])
def test_malformed_profile_is_a_config_error_naming_file_and_key(
    project: ProjectPaths, old: str, new: str, key: str, hint: str
) -> None:
    path = project.profile("cpu-smoke")
    _edit(path, old, new)
    with pytest.raises(ConfigError) as info:
        load_profile(project, "cpu-smoke")
    text = info.value.render()
    assert str(path) in text and key in text, text
    assert hint in text, text


@pytest.mark.parametrize(("old", "new"), [(b[0], b[1]) for b in BAD[:3]] + [('torch = "2.13.0+cpu"', "torch = 2.7")])
def test_cli_exits_2_and_writes_nothing(
    project: ProjectPaths, capsys: pytest.CaptureFixture[str], old: str, new: str
) -> None:
    _edit(project.profile("cpu-smoke"), old, new)
    before = {p.name: p.read_bytes() for p in project.lockfiles.iterdir()}
    assert main(["lock", "--profile", "cpu-smoke"]) == 2
    err = capsys.readouterr().err
    assert "cpu-smoke.toml" in err and "error:" in err
    assert {p.name: p.read_bytes() for p in project.lockfiles.iterdir()} == before


def test_unknown_profile_name_suggests_the_closest(project: ProjectPaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--profile", "cpu-smok"]) == 2
    assert "did you mean 'cpu-smoke'" in capsys.readouterr().err


def test_bases_toml_rejects_a_bad_digest(project: ProjectPaths) -> None:
    _edit(
        project.bases,
        'image = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"',
        'image = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"\ndigest = "sha256:abc"',
    )
    with pytest.raises(ConfigError, match=r"bases\.cuda12\.4\.1-runtime-ubuntu22\.04\.digest"):
        load_profile(project, "cpu-smoke")


def test_registry_bases_are_recorded_by_tag_only(repo_paths: ProjectPaths) -> None:
    from verlenv.profiles.bases import load_bases

    bases = load_bases(repo_paths.bases)
    cuda = [b for b in bases.values() if b.kind == "registry"]
    assert cuda and all(b.image.startswith("nvidia/cuda:") and not b.pinned for b in cuda)
