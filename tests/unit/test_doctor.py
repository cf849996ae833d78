"""doctor in real venvs broken on purpose: it reports, never crashes; JSON validates; exit codes hold."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import jsonschema
import pytest

from tests.helpers.fakewheels import Variant, build_pair, build_wheel
from tests.helpers.venvs import Venv, make_venv
from verlenv.inside.doctor.checks_binary import host_library_variants
from verlenv.inside.doctor.model import Check, Facts, Result, Status
from verlenv.inside.doctor.registry import CHECKS
from verlenv.inside.doctor.runner import redact, run_checks
from verlenv.verify.abi import Finding, ObjectVerdict

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "verlenv/schemas/doctor-1.schema.json").read_text())


def _doctor(venv: Venv, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = venv.verlenv("doctor", "--json", "--skip", "shm", *args, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["exit_code"] == proc.returncode
    return proc.returncode, {c["id"]: c for c in report["checks"]}


def _vllm(folder: Path, version: str, torch_pin: str, c_module: bytes) -> Path:
    return build_wheel(
        folder,
        "vllm",
        version,
        {
            "vllm/__init__.py": f"__version__ = '{version}'".encode(),
            "vllm/_version.py": f"__version__ = '{version}'".encode(),
            "vllm/_C.py": c_module,
        },
        requires=[f"torch=={torch_pin}"],
    )


NO_DRIVER = b"raise ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')"
BAD_ABI = b"raise ImportError('/x/vllm/_C.abi3.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs')"


@pytest.fixture
def healthy(tmp_path: Path) -> Venv:
    venv = make_venv(tmp_path / "venv")
    torch, ext = build_pair(tmp_path / "b", Variant())
    venv.pip(str(torch), str(ext))
    return venv


def test_healthy_env_passes_and_a_missing_driver_is_a_warning(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_vllm(tmp_path, "0.8.5.post1", "2.6.0", NO_DRIVER)))
    code, checks = _doctor(healthy)
    assert code == 0, checks
    assert checks["import-probe"]["status"] == "warn"
    assert "need the NVIDIA driver" in checks["import-probe"]["summary"]
    assert checks["elf-abi"]["status"] == "ok" and checks["torch-pin"]["status"] == "ok"
    assert checks["manifest-drift"]["status"] == "skip"


def test_undefined_symbol_on_import_is_an_abi_failure(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_vllm(tmp_path, "0.8.5.post1", "2.6.0", BAD_ABI)))
    code, checks = _doctor(healthy)
    assert code == 1
    assert checks["import-probe"]["status"] == "fail"
    assert "undefined symbol" in checks["import-probe"]["summary"]
    assert any("vllm._C" in d for d in checks["import-probe"]["details"])


def test_torch_that_cannot_import_is_reported_not_fatal(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    broken = build_wheel(tmp_path, "torch", "2.6.0", {"torch/__init__.py": BAD_ABI})
    venv.pip(str(broken))
    code, checks = _doctor(venv)
    assert code == 1
    assert checks["import-probe"]["status"] == "fail" and "import torch fails" in checks["import-probe"]["summary"]
    # every check but the skipped shm one reported, none crashed
    assert len(checks) == len(CHECKS) - 1 and not [c for c in checks.values() if c["status"] == "crashed"]


def test_missing_symbol_in_installed_torch_fails_the_elf_check(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    venv.pip(*map(str, build_pair(tmp_path / "b", Variant(torch_has_mul=False))))
    code, checks = _doctor(venv)
    assert code == 1 and checks["elf-abi"]["status"] == "fail"
    assert any("at::mul(int, int)" in d for d in checks["elf-abi"]["details"])


def test_vllm_built_for_another_torch_is_the_version_illusion(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_vllm(tmp_path, "0.9.1", "2.7.0", NO_DRIVER)))
    code, checks = _doctor(healthy)
    assert code == 1
    assert checks["torch-pin"]["summary"] == "vllm 0.9.1 was built for torch 2.7.0; torch 2.6.0 is installed"
    assert checks["requirements"]["status"] == "fail"


def test_known_bad_vllm_line_fails(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_vllm(tmp_path, "0.7.3", "2.6.0", NO_DRIVER)))
    code, checks = _doctor(healthy)
    assert code == 1 and checks["vllm-verl-range"]["status"] == "fail"
    assert "0.7.x" in checks["vllm-verl-range"]["summary"]


def test_drift_from_the_manifest_is_a_failure(tmp_path: Path, healthy: Venv) -> None:
    manifest = {
        "schema_version": 1,
        "profile": "fixture",
        "lock_sha256": "a" * 64,
        "verify_sha256": "b" * 64,
        "source_date_epoch": 0,
        "components": {"python": "3.11"},
        "layers": {},
        "base": {},
        "verlenv_version": "0",
        "distributions": {"torch": "2.6.0", "fakeext": "0.9", "gone": "1.0"},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    code, checks = _doctor(healthy, "--manifest", str(path))
    drift = checks["manifest-drift"]
    assert code == 1 and drift["status"] == "fail"
    assert "changed: fakeext 0.9 -> 1.0" in drift["details"] and "removed: gone 1.0" in drift["details"]


def test_strict_turns_warnings_into_failure_and_skip_is_checked(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_vllm(tmp_path, "0.8.5.post1", "2.6.0", NO_DRIVER)))
    code, _ = _doctor(healthy, "--strict")
    assert code == 1
    proc = healthy.verlenv("doctor", "--skip", "import-prob")
    assert proc.returncode == 2 and "did you mean 'import-probe'" in proc.stderr


def test_table_output_and_verbose_timings(healthy: Venv) -> None:
    proc = healthy.verlenv("doctor", "-v", "--skip", "shm")
    assert proc.returncode == 0, proc.stdout
    assert "[ok]   elf-abi" in proc.stdout and " ms)" in proc.stdout


def test_a_crashing_check_never_hides_the_others() -> None:
    def boom(_: Facts) -> Result:
        raise KeyError("surprise")

    def fine(_: Facts) -> Result:
        return Result(Status.OK, "fine")

    outcomes = run_checks(
        [Check("boom", "explodes", boom), Check("fine", "works", fine)], Facts(site=Path("/nonexistent"))
    )
    assert [(o.id, o.result.status) for o in outcomes] == [("boom", Status.CRASHED), ("fine", Status.OK)]
    assert "KeyError" in outcomes[0].result.summary


def test_secrets_and_gpu_uuids_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_sup3rs3cret")
    text = redact("token hf_sup3rs3cret on GPU-8c6b6c56-1c7f-6c2a-f1b2-1a2b3c4d5e6f")
    assert text == "token <redacted> on GPU-<redacted>"


def test_secret_names_are_listed_never_their_values(healthy: Venv) -> None:
    _code, checks = _doctor(healthy, env={"WANDB_API_KEY": "abcd1234secret", "TIKTOKEN_CACHE_DIR": "/tmp/tk"})
    assert checks["secrets"]["status"] == "warn" and "WANDB_API_KEY" in checks["secrets"]["summary"]
    assert "1 secret-like" in checks["secrets"]["summary"]  # a *_DIR is where things live, not a secret
    assert "abcd1234secret" not in json.dumps(checks)


def test_small_shm_fails_with_the_docker_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from verlenv.inside.doctor import checks_runtime

    class Small:
        f_frsize, f_blocks = 4096, 16384  # 64 MiB

    monkeypatch.setattr(checks_runtime.os, "statvfs", lambda _: Small())
    result = checks_runtime.check_shm(Facts(site=tmp_path))
    assert result.status is Status.FAIL and "--ipc=host" in result.fix and "64 MiB" in result.summary


def test_env_traps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from verlenv.inside.doctor import checks_runtime

    monkeypatch.setenv("NCCL_CUMEM_ENABLE", "1")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    result = checks_runtime.check_env(Facts(site=tmp_path))
    assert result.status is Status.WARN and "NCCL_CUMEM_ENABLE=1" in result.summary
    assert any("expandable_segments" in d for d in result.details)


def test_wrapped_import_error_is_traced_to_the_missing_driver(tmp_path: Path, healthy: Venv) -> None:
    """vLLM's flash-attn package hides the loader's message; doctor dlopens the .so to find it."""
    from tests.helpers.fakewheels import compile_so

    stub = compile_so(
        tmp_path / "libcuda.so.1", 'extern "C" int cuInit(unsigned f) { return 0; }', 1, soname="libcuda.so.1"
    )
    ext = compile_so(
        tmp_path / "_vllm_fa2_C.abi3.so",
        'extern "C" int cuInit(unsigned); int f() { return cuInit(0); }',
        1,
        libs=[stub],
    )
    stub.unlink()  # like a build host: the driver library is absent
    wrapper = (
        b"try:\n    from . import _vllm_fa2_C\nexcept ImportError:\n    _missing = True\n"
        b"if globals().get('_missing'):\n    raise ImportError('vllm.vllm_flash_attn requires the CUDA flash "
        b"attention extensions (_vllm_fa2_C or _vllm_fa3_C).')\n"
    )
    wheel = build_wheel(
        tmp_path,
        "vllm",
        "0.8.5.post1",
        {
            "vllm/__init__.py": b"__version__ = '0.8.5.post1'",
            "vllm/vllm_flash_attn/__init__.py": wrapper,
            "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": ext.read_bytes(),
            "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": ext.read_bytes(),
        },
        requires=["torch==2.6.0"],
    )
    healthy.pip(str(wheel))
    code, checks = _doctor(healthy)
    probe = checks["import-probe"]
    assert code == 0 and probe["status"] == "warn", probe
    [detail] = [d for d in probe["details"] if d.startswith("vllm.vllm_flash_attn._vllm_fa2_C")]
    assert "requires the CUDA flash attention extensions" in detail
    assert "dlopen _vllm_fa2_C.abi3.so: libcuda.so.1: cannot open shared object file" in detail


def _verdict(path: str, kind: str | None) -> ObjectVerdict:
    findings = (Finding(kind, "m", "fix"),) if kind else ()
    return ObjectVerdict("codec 1.0", path, ("libc10.so",), findings, "cxx11", 3)


def test_a_package_with_builds_for_host_libraries_it_cannot_find_is_a_warning_not_a_failure() -> None:
    # torchcodec ships one core per FFmpeg major; on a host without FFmpeg none loads: unavailable, not broken
    every_build = [_verdict("codec/libcore4.so", "missing-needed"), _verdict("codec/libcore5.so", "missing-needed")]
    assert host_library_variants(tuple(every_build)) == every_build
    single = [_verdict("codec/libonly.so", "missing-needed")]
    assert host_library_variants(tuple(single)) == []
    wrong_torch = [_verdict("codec/libcore4.so", "missing-needed"), _verdict("codec/libcore5.so", "missing-symbols")]
    assert host_library_variants(tuple(wrong_torch)) == []


def _probed(torch: dict) -> Facts:  # type: ignore[type-arg]
    facts = Facts(manifest_file=Path("/nonexistent"))
    facts._probe = {"torch": torch, "modules": {}}
    return facts


def test_the_driver_is_read_through_nvml_and_the_driver_api_where_proc_has_none() -> None:
    # The H200 VM has no /proc/driver/nvidia; torch and NVML still see the driver (seen 2026-12-03).
    from verlenv.inside.doctor.checks_runtime import check_driver

    gpu = {"cuda": "13.0", "cuda_available": True, "driver": 13000, "nvml_driver": "580.159.04"}
    result = check_driver(_probed(gpu))
    assert result.status == Status.OK and "580.159.04" in result.summary and "CUDA <= 13.0" in result.summary
    old = check_driver(_probed({**gpu, "driver": 12080, "nvml_driver": "570.86"}))
    assert old.status == Status.FAIL and "too old" in old.summary and "12.8" in old.fix
    assert check_driver(_probed({"cuda": None, "cuda_available": False})).status == Status.SKIP


def test_the_recorded_elf_scan_is_used_and_a_file_changed_since_is_read_again(tmp_path: Path, healthy: Venv) -> None:
    manifest = tmp_path / "manifest.json"
    fields = {"profile": "fixture", "lock_sha256": "a" * 64, "verify_sha256": "b" * 64, "source_date_epoch": 0}
    fields |= {"components": {}, "layers": {}, "base": {}, "verlenv_version": "0", "distributions": {}}
    manifest.write_text(json.dumps({"schema_version": 1, **fields}))

    def elf(*extra: str) -> dict:  # type: ignore[type-arg]
        return _doctor(healthy, "--static", "--manifest", str(manifest), *extra)[1]["elf-abi"]

    first = elf("--write-elf-cache")  # what the image build's self-check does
    assert first["status"] == "ok" and "3 shared object(s) read, 0 unchanged" in first["details"][-1]
    assert (tmp_path / "elfscan.json").exists() and (tmp_path / "elfscan-objects.json.gz").exists()
    again = elf()
    assert again["status"] == "ok" and "0 shared object(s) read, 3 unchanged" in again["details"][-1]
    # torch's library replaced after the build by one without at::mul: that file is read again, the
    # others come from the record, and the verdict is the one a full scan gives
    torch_cpu = healthy.site / "torch" / "lib" / "libtorch_cpu.so"
    broken = build_pair(tmp_path / "broken", Variant(torch_has_mul=False))[0]
    with zipfile.ZipFile(broken) as wheel:
        torch_cpu.write_bytes(wheel.read("torch/lib/libtorch_cpu.so"))
    changed = elf()
    assert changed["status"] == "fail" and any("at::mul(int, int)" in d for d in changed["details"])
    assert "1 shared object(s) read, 2 unchanged" in changed["details"][-1]


def _engine(folder: Path, name: str, version: str, torch_pin: str) -> Path:
    files = {f"{name}/__init__.py": b"", f"{name}/version.py": f"__version__ = '{version}'".encode()}
    return build_wheel(folder, name, version, files, requires=[f"torch=={torch_pin}"])


def _verl(folder: Path, version: str, sglang_pin: str) -> Path:
    requires = [f'sglang=={sglang_pin}; extra == "sglang"', 'vllm>=0.8.5; extra == "vllm"']
    return build_wheel(folder, "verl", version, {"verl/__init__.py": b""}, requires=requires)


def test_sglang_is_checked_against_verls_own_sglang_pin_and_its_torch_pin(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_engine(tmp_path, "sglang", "0.5.5", "2.6.0")), str(_verl(tmp_path, "0.6.1", "0.5.5")))
    _, checks = _doctor(healthy)
    assert checks["sglang-verl-pin"]["status"] == "ok", checks["sglang-verl-pin"]
    assert checks["torch-pin"]["status"] == "ok" and "sglang 0.5.5 built for it" in checks["torch-pin"]["summary"]
    assert checks["engines"]["status"] == "skip"


def test_an_sglang_other_than_verls_pin_fails_naming_both(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_engine(tmp_path, "sglang", "0.5.5", "2.6.0")), str(_verl(tmp_path, "0.9.1", "0.5.12")))
    code, checks = _doctor(healthy)
    pin = checks["sglang-verl-pin"]
    assert code == 1 and pin["status"] == "fail"
    assert pin["summary"] == "verl 0.9.1's [sglang] extra pins sglang==0.5.12; SGLang 0.5.5 is installed"


def test_two_engines_wanting_different_torches_are_a_warning(tmp_path: Path, healthy: Venv) -> None:
    healthy.pip(str(_engine(tmp_path, "sglang", "0.5.5", "2.6.0")), str(_vllm(tmp_path, "0.9.1", "2.7.0", NO_DRIVER)))
    _, checks = _doctor(healthy)
    assert checks["engines"]["status"] == "warn" and "different torch versions" in checks["engines"]["summary"]
    assert checks["torch-pin"]["status"] == "fail"  # vLLM 0.9.1 was built for torch 2.7.0


def test_the_probe_reads_the_driver_api_from_libcuda_even_when_cuda_is_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch 2.11 has no torch._C._cuda_getDriverVersion (seen on the H200: "runs CUDA <= ?");
    # the probe asks libcuda itself. A libcuda.so.1 compiled here stands in for the driver.
    import subprocess as sp

    from verlenv.inside.doctor.checks_runtime import check_driver
    from verlenv.inside.doctor.probe import run_probe

    source = tmp_path / "cuda.c"
    source.write_text("int cuDriverGetVersion(int *v) { *v = 12040; return 0; }\n")
    sp.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(source)], check=True)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    probe = run_probe(120)
    assert probe["torch"]["driver"] == 12040  # type: ignore[index]
    result = check_driver(_probed(probe["torch"]))  # type: ignore[arg-type]
    assert "runs CUDA <= 12.4" in result.summary


def test_deepgemm_without_a_cuda_toolkit_is_a_warning_with_its_own_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # seen building the SGLang image: DeepGEMM asserts CUDA_HOME at import (an empty AssertionError)
    # and sgl_kernel needs libcuda; neither is a broken build, both are what this host lacks
    from verlenv.inside.doctor import checks_binary

    probe = {"deep_gemm": "AssertionError: ", "sgl_kernel": "ImportError: libcuda.so.1: cannot open shared object"}
    facts = _probed({"version": "2.11.0"})
    facts._probe["modules"] = probe  # type: ignore[index]
    monkeypatch.setattr(checks_binary, "cuda_toolkit", lambda: "")
    result = checks_binary.check_imports(facts)
    assert result.status is Status.WARN, result
    assert "deep_gemm needs a CUDA toolkit (CUDA_HOME)" in result.summary and "NVIDIA driver" in result.summary
    assert "CUDA_HOME" in result.fix and "--gpus all" in result.fix
    monkeypatch.setattr(checks_binary, "cuda_toolkit", lambda: "/usr/local/cuda")  # a toolkit, and it still fails
    assert checks_binary.check_imports(facts).status is Status.FAIL


def test_the_cuda_toolkit_is_found_as_deepgemm_looks_for_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from verlenv.inside.doctor.checks_binary import cuda_toolkit

    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert cuda_toolkit() == str(tmp_path)
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(nvcc.parent))
    assert cuda_toolkit() == str(tmp_path / "cuda")


def test_the_probe_starts_before_the_parser_only_for_doctor_runs_that_use_it() -> None:
    from verlenv.inside.doctor import probe

    for argv in (["doctor", "--skip", "import-probe"], ["clean"], ["doctor", "--list"]):
        probe.start_early(argv)
        assert not probe._early, argv
    probe.start_early(["doctor", "--static", "--write-elf-cache"])  # the build's self-check
    [early] = probe._early
    assert probe.start_probe() is early and not probe._early  # taken once, by the run it was started for
    assert "torch" in probe.finish_probe(early, 120)
    probe.start_early(["doctor", "--json"])
    assert "torch" in probe.finish_probe(probe.start_probe(), 120)


def _stand_ins(root: Path, vllm: str, flashinfer: str = "") -> None:
    """Stand-in vllm and flashinfer packages whose imports run the given code."""
    for name, code in (("vllm", vllm), ("flashinfer", flashinfer)):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(code)


_WHO = "import os; open(os.environ['WHO'] + '/{0}.pid', 'w').write(f'{{os.getpid()}} {{os.getppid()}}')\n"


def test_vllm_imports_in_a_fork_of_the_probe_beside_the_other_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two cores here and in CI: vLLM's chain runs in a fork of the probe, after its import torch
    from verlenv.inside.doctor import probe

    _stand_ins(tmp_path, _WHO.format("vllm"), _WHO.format("flashinfer") + "raise ImportError('undefined symbol: _ZX')")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("WHO", str(tmp_path))
    proc = probe.start_probe()
    found = probe.finish_probe(proc, 120)
    assert found["torch"]["version"]  # type: ignore[index]
    assert list(found["modules"]) == ["vllm", "flashinfer"]  # EXTENSIONS order  # type: ignore[arg-type]
    assert found["modules"]["vllm"] == "ok"  # type: ignore[index]
    assert "undefined symbol: _ZX" in found["modules"]["flashinfer"]  # type: ignore[index]
    vllm_pid, vllm_parent = map(int, (tmp_path / "vllm.pid").read_text().split())
    assert vllm_parent == proc.pid != vllm_pid  # a fork of the probe
    assert int((tmp_path / "flashinfer.pid").read_text().split()[0]) == proc.pid


def test_a_module_that_kills_the_fork_is_named_and_the_rest_still_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verlenv.inside.doctor import probe

    _stand_ins(tmp_path, "", "raise ImportError('flashinfer: no libcuda')")
    (tmp_path / "vllm" / "_C.py").write_text("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    found = probe.run_probe(120)
    assert found["modules"] == {  # vllm._moe_C and the rest come after the crash: not reached
        "vllm": "ok",
        "vllm._C": "its import killed the process (signal 11)",
        "flashinfer": "ImportError: flashinfer: no libcuda",
    }


def test_a_probe_past_its_timeout_takes_its_fork_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from verlenv.inside.doctor import probe

    _stand_ins(tmp_path, _WHO.format("vllm") + "import time; time.sleep(120)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("WHO", str(tmp_path))
    proc = probe.start_probe()
    while not (tmp_path / "vllm.pid").is_file() or not (tmp_path / "vllm.pid").read_text():
        time.sleep(0.1)
    assert probe.finish_probe(proc, 0.5) == {"error": "the import probe did not finish within 0s"}
    fork = int((tmp_path / "vllm.pid").read_text().split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{fork}").exists() and "Z" not in _state(fork) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{fork}").exists() or "Z" in _state(fork)


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (OSError, StopIteration):
        return "gone"
