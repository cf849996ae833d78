"""Import probes in a subprocess with a timeout: a broken torch or vLLM is reported, never fatal.

One child process imports torch, reads CUDA / GPU / NCCL facts, and imports each compiled
extension module it can find, recording for each the exception text instead of dying on it.
Where it may use a second core, it forks right after `import torch` (before anything initialises
CUDA) and vLLM's modules import in the fork: `import vllm` is the longest chain (2-3 s after
torch's 1.3-2 s in the default image), and the fork shares torch's import instead of repeating it.
A module whose import kills the fork (a segfaulting extension) is named, with the signal.
"""

from __future__ import annotations

import itertools
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
def import_one(name):
    # None when the module is not installed, else "ok" or why its import failed
    try:
        if importlib.util.find_spec(name.split(".")[0]) is None:
            return None
        importlib.import_module(name)
        return "ok"
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        return " <- ".join(filter(None, [describe(exc), dlopen_error(name)]))
    except BaseException as exc:
        return " <- ".join(filter(None, [describe(exc), dlopen_error(name)]))
def import_beside(names):
    # import ``names`` in a fork, one JSON line per module through a pipe; returns a function that
    # waits for the fork and gives its (name, result) pairs
    import ctypes, os, signal
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        # killed with the probe: a timeout kills the probe, and an import hung here must not outlive it
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
        os.close(read)
        with os.fdopen(write, "w") as pipe:
            for name in names:
                pipe.write(json.dumps([name, import_one(name)]) + "\n")
                pipe.flush()
        os._exit(0)
    os.close(write)
    def wait():
        with os.fdopen(read) as pipe:
            done = [json.loads(line) for line in pipe if line.endswith("\n")]
        _, status = os.waitpid(pid, 0)
        if len(done) < len(names):  # the fork died importing the next module
            name = names[len(done)]
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            done.append([name, f"its import killed the process ({why})"])
        return done
    return wait
def spare_core():
    import os
    return len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) > 1
names = sys.argv[1:]
beside = [n for n in names if n.split(".")[0] == "vllm"]
later = lambda: []
try:
    import torch
    if beside and spare_core() and importlib.util.find_spec("vllm") is not None:
        later, names = import_beside(beside), [n for n in names if n not in beside]
    t = {"version": torch.__version__, "cuda": torch.version.cuda,
         "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
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
imported = [(name, import_one(name)) for name in names] + later()
out["modules"] = {name: error for name, error in sorted(imported, key=lambda p: sys.argv.index(p[0])) if error}
print("\n@@PROBE@@" + json.dumps(out))
"""


_early: list[subprocess.Popen[str]] = []


def start_early(argv: list[str]) -> None:
    """Start the probe before the CLI imports anything else, when this is a doctor run that will want it.

    Importing the doctor's modules and building the parser takes about 0.2 s, all of it on the path
    to the probe's answer; started here, the probe's `import torch` overlaps that too. The build's
    self-check (`doctor --static`) wants it as much as a run on a GPU host does.
    """
    skipped = {after for before, after in itertools.pairwise(argv) if before == "--skip"}
    skipped |= {arg.partition("=")[2] for arg in argv if arg.startswith("--skip=")}
    wants = argv[:1] == ["doctor"] and "import-probe" not in skipped
    wants = wants and not {"--list", "--cluster", "-h", "--help"} & set(argv)
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
