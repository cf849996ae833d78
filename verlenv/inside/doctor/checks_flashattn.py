"""flash-attn for real: import it and, on a GPU, run its varlen kernels forward and backward.

The ELF check says whether flash_attn_2_cuda can link against this torch; only running it says whether
the kernels work on this GPU. verl 0.9.1 trains every model with flash_attention_2 by default.
The work happens in flashattn_run.py, in a child process with the import probe's timeout.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from verlenv.inside.doctor.checks_binary import _NO_DRIVER
from verlenv.inside.doctor.flashattn_run import MARKER
from verlenv.inside.doctor.model import Facts, Result, Status
from verlenv.inside.installed import Installed
from verlenv.verify.abi import string_abi
from verlenv.verify.demangle import demangle

SDPA = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_BUILT_FOR = re.compile(r"torch(\d+\.\d+)")  # release wheels: flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-...
_REINSTALL = f"reinstall flash-attn built for this torch and CUDA; until then run verl with {SDPA}"


def check_flash_attn(facts: Facts) -> Result:
    dist = facts.installed.get("flash-attn")
    if dist is None:
        return Result(
            Status.SKIP,
            "flash-attn is not installed: verl's default attention (flash_attention_2) needs it",
            fix=f"an image whose profile brings flash-attn; or run verl with {SDPA} and no critic "
            "(`verlenv doctor --config RUN.yaml` says what your config needs)",
        )
    sites = [str(facts.site), *sorted({str(s) for s in facts.lent.values()})]
    return judge(run(sites, facts.probe_timeout), dist.version, built_for(dist))


def run(sites: list[str], timeout: float) -> dict[str, Any]:
    """flashattn_run in a child process; {"error": ...} when it hangs or dies before it reports."""
    command = [sys.executable, "-m", "verlenv.inside.doctor.flashattn_run", *sites]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f}s"}
    marker = proc.stdout.rfind(MARKER)
    if marker < 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"error": f"died (exit {proc.returncode}): " + " | ".join(tail)}
    return json.loads(proc.stdout[marker + len(MARKER) :])


def built_for(dist: Installed) -> str:
    """The torch a flash-attn release wheel names (its version label or the URL pip recorded); '' if unknown."""
    direct = dist.path / "direct_url.json"
    url = json.loads(direct.read_text()).get("url", "") if direct.is_file() else ""
    match = _BUILT_FOR.search(dist.version) or _BUILT_FOR.search(url)
    return match.group(1) if match else ""


def judge(report: dict[str, Any], version: str, built: str = "") -> Result:
    """The child's report as a doctor result; ``built`` is the torch the wheel was built for, when known."""
    if "error" in report:
        return Result(
            Status.FAIL,
            f"the flash-attn check {report['error']}",
            fix="run `python -c 'import flash_attn_2_cuda'` to see the error in full",
        )
    if "torch_error" in report:
        return Result(Status.FAIL, f"flash-attn {version} cannot load: import torch fails", (report["torch_error"],))
    if report.get("import_error"):
        return _import_failure(report, version, built)
    imported = f"flash-attn {version} imports ({report.get('extension', '').rsplit('/', 1)[-1]})"
    if "gpu" not in report:
        return Result(Status.OK, f"{imported}; no GPU here, so its kernels did not run")
    return _gpu_result(report["gpu"], version, imported)


def _import_failure(report: dict[str, Any], version: str, built: str) -> Result:
    error, torch = str(report["import_error"]), report.get("torch") or {}
    installed = torch.get("version", "?")
    symbol = _UNDEFINED.search(error)
    if symbol:
        return Result(
            Status.FAIL,
            f"flash-attn {version} does not load: undefined symbol {demangle(symbol.group(1))}",
            (error,),
            fix=_abi_fix(version, built, installed, symbol.group(1), torch.get("cxx11_abi")),
        )
    if _NO_DRIVER.search(error):
        return Result(
            Status.WARN,
            f"flash-attn {version} needs the NVIDIA driver to import, which is not present here",
            (error,),
            fix="expected on a build host; on a GPU node run the container with --gpus all",
        )
    return Result(
        Status.FAIL,
        f"flash-attn {version} does not import: {error.split(' <- ')[0]}",
        (error,),
        fix=f"reinstall flash-attn built for torch {installed}, or run verl with {SDPA}",
    )


def _abi_fix(version: str, built: str, installed: str, symbol: str, cxx11: object) -> str:
    made = f"was built for torch {built}" if built else "was built against another torch"
    text = f"flash-attn {version} {made}; torch {installed} is installed and does not export this symbol"
    abi, wanted = string_abi([symbol]), "cxx11" if cxx11 else "pre-cxx11"
    if abi in ("cxx11", "pre-cxx11") and isinstance(cxx11, bool) and abi != wanted:
        flag = str(cxx11).upper()
        text += f" (it was built with the {abi} C++ string ABI, torch with {wanted}: take the cxx11abi{flag} wheel)"
    return (
        f"{text}: rebuild it against torch {installed} (pip install --no-build-isolation --no-deps "
        f"flash-attn=={version.split('+')[0]}), or relock so flash-attn is built for the profile's torch"
    )


def _gpu_result(gpu: dict[str, Any], version: str, imported: str) -> Result:
    device = gpu.get("device", "the GPU")
    if gpu.get("error"):
        return Result(
            Status.FAIL, f"{imported}, but its kernels fail on {device}", (gpu["error"],), fix=_kernel_fix(gpu["error"])
        )
    ran = (
        f"a causal bf16 varlen forward and backward on {device} (sequences of {' and '.join(map(str, gpu['lengths']))})"
    )
    error, limit = float(gpu["max_error"]), float(gpu["limit"])
    measured = f"max |out - PyTorch attention| {error:.3g} (limit {limit:.3g})"
    if not gpu.get("grads_finite"):
        return Result(
            Status.FAIL, f"flash-attn {version} ran {ran}: gradients are not finite", (measured,), fix=_REINSTALL
        )
    if not error <= limit:  # NaN fails too
        return Result(
            Status.FAIL,
            f"flash-attn {version} ran {ran}: its output differs from PyTorch's",
            (measured,),
            fix=_REINSTALL,
        )
    return Result(Status.OK, f"flash-attn {version} ran {ran}: {measured}, gradients finite")


def _kernel_fix(error: str) -> str:
    if "no kernel image" in error:
        return (
            "flash-attn was not built for this GPU's architecture: rebuild it with FLASH_ATTN_CUDA_ARCHS naming it "
            "(90 for H100/H200)"
        )
    if "Ampere" in error:
        return f"this GPU is older than Ampere, which flash-attn 2 needs: run verl with {SDPA}"
    return _REINSTALL
