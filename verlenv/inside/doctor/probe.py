"""Import probes in a subprocess with a timeout: a broken torch or vLLM is reported, never fatal.

One child process imports torch, reads CUDA / GPU / NCCL facts, and imports each compiled
extension module it can find, recording for each the exception text instead of dying on it.
"""

from __future__ import annotations

import json
import subprocess
import sys

EXTENSIONS = (
    "vllm",
    "vllm._C",
    "vllm._moe_C",
    "vllm.cumem_allocator",
    "vllm._flashmla_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
    "flash_attn_2_cuda",
    "sglang",
    "sgl_kernel",
    "deep_gemm",
    "torch_memory_saver",
    "flashinfer",
    "xformers._C",
)

_CHILD = r"""
import importlib, importlib.util, json, sys
out = {"torch": None, "modules": {}}
def describe(exc):
    # The whole chain: vLLM wraps "libcuda.so.1 not found" in its own ImportError.
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts)
def dlopen_error(name):
    # A package __init__ may replace the loader's message with its own ("requires the CUDA
    # flash attention extensions"): dlopen the extension file itself to learn the real cause.
    import ctypes, glob, os
    spec = importlib.util.find_spec(name.split(".")[0])
    roots = list(spec.submodule_search_locations or []) if spec else []
    rel = os.path.join(*name.split(".")[1:]) if "." in name else ""
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, rel) + "*.so")):
            try:
                ctypes.CDLL(path)
            except OSError as exc:
                return f"dlopen {os.path.basename(path)}: {exc}"
    return ""
def driver_api_version():
    # cuDriverGetVersion straight from libcuda: torch 2.11 has no _cuda_getDriverVersion (seen on the H200)
    import ctypes
    try:
        v = ctypes.c_int()
        return v.value if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    except (OSError, AttributeError):
        return None
def nccl_maps():
    # the libnccl copies this process has mapped, after import torch and the NCCL-free calls above
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "/libnccl" in line}
    except OSError:
        return []
    return sorted(p for p in paths if ".so" in p and "/libnccl-net" not in p)
try:
    import torch
    t = {"version": torch.__version__, "cuda": torch.version.cuda, "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
         "arch_list": torch.cuda.get_arch_list() if hasattr(torch.cuda, "get_arch_list") else [],
         "cuda_available": False, "devices": [], "nccl": None, "driver": driver_api_version()}
    try:
        t["cuda_available"] = bool(torch.cuda.is_available())
        if t["cuda_available"]:
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                t["devices"].append({"name": p.name, "capability": list(torch.cuda.get_device_capability(i)),
                                     "memory_gib": round(p.total_memory / 2**30, 1)})
            try:  # the kernel driver's own version, from NVML (no /proc/driver/nvidia in some VMs)
                import pynvml
                pynvml.nvmlInit()
                t["nvml_driver"] = pynvml.nvmlSystemGetDriverVersion()
            except Exception as exc:
                t["nvml_error"] = describe(exc)
    except Exception as exc:
        t["cuda_error"] = describe(exc)
    try:
        v = torch.cuda.nccl.version()
        t["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        t["nccl_error"] = describe(exc)
    t["nccl_maps"] = nccl_maps()
    out["torch"] = t
except Exception as exc:
    out["torch_error"] = describe(exc)
for name in sys.argv[1:]:
    try:
        if importlib.util.find_spec(name.split(".")[0]) is None:
            continue
        importlib.import_module(name)
        out["modules"][name] = "ok"
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            continue
        out["modules"][name] = " <- ".join(filter(None, [describe(exc), dlopen_error(name)]))
    except BaseException as exc:
        out["modules"][name] = " <- ".join(filter(None, [describe(exc), dlopen_error(name)]))
print("\n@@PROBE@@" + json.dumps(out))
"""


_early: list[subprocess.Popen[str]] = []


def start_early(argv: list[str]) -> None:
    """Start the probe before the CLI imports anything else, when this is a doctor run that will want it.

    Importing the doctor's modules and building the parser takes about 0.2 s, all of it on the path
    to the probe's answer; started here, the probe's `import torch` overlaps that too.
    """
    wants = argv[:1] == ["doctor"] and not {"--static", "--list", "--skip", "--cluster", "-h", "--help"} & set(argv)
    if wants and not _early:
        _early.append(_spawn())


def start_probe() -> subprocess.Popen[str]:
    """Start the probe now (or take the one started early); it imports torch on another core while the
    other checks run here."""
    return _early.pop() if _early else _spawn()


def _spawn() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *EXTENSIONS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish_probe(proc: subprocess.Popen[str], timeout: float) -> dict[str, object]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"the import probe did not finish within {timeout:.0f}s"}
    marker = stdout.rfind("@@PROBE@@")
    if marker < 0:
        tail = (stderr or stdout).strip().splitlines()[-5:]
        return {"error": f"the import probe died (exit {proc.returncode}): " + " | ".join(tail)}
    return json.loads(stdout[marker + len("@@PROBE@@") :])


def run_probe(timeout: float) -> dict[str, object]:
    return finish_probe(start_probe(), timeout)
