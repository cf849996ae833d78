"""The ordered list of doctor checks. Ids are stable: --skip and JSON consumers use them."""

from __future__ import annotations

from verlenv.inside.doctor import checks_binary as b
from verlenv.inside.doctor import checks_flashattn as fa
from verlenv.inside.doctor import checks_install as i
from verlenv.inside.doctor import checks_runtime as r
from verlenv.inside.doctor import checks_sglang as s
from verlenv.inside.doctor import checks_toolchain as t
from verlenv.inside.doctor.model import Check

CHECKS: tuple[Check, ...] = (
    Check("python", "Python and platform", i.check_python),
    Check("manifest-drift", "Installed distributions vs the image manifest", i.check_manifest),
    Check("requirements", "Requirements of installed distributions (pip check)", i.check_requirements),
    Check("vllm-verl-range", "vLLM version vs verl's accepted range", i.check_vllm_gate),
    Check("sglang-verl-pin", "SGLang version vs the one verl's [sglang] extra pins", i.check_sglang_pin),
    Check("torch-pin", "The engines' torch pins vs installed torch", i.check_version_illusion),
    Check("engines", "vLLM and SGLang side by side", i.check_engines),
    Check("elf-abi", "Compiled extensions vs the installed torch (ELF)", b.check_elf),
    Check("import-probe", "Import of torch and compiled extension modules", b.check_imports, uses_probe=True),
    Check("stale-artifacts", "Leftovers of other versions", b.check_stale),
    # compiles for real, in the build's self-check too: an image that cannot is never tagged
    Check(
        "jit-toolchain", "Run-time compilers: Triton's C, Inductor's C++, nvcc for JIT kernels", t.check_jit_toolchain
    ),
    Check("sglang-jit", "SGLang's JIT kernels vs this image's nvcc and host compiler", s.check_sglang_jit),
    Check("cuda-driver", "NVIDIA driver vs the CUDA the wheels need", r.check_driver, static=False, uses_probe=True),
    Check(
        "gpu-arch", "GPU compute capability vs torch's architectures", r.check_gpu_arch, static=False, uses_probe=True
    ),
    Check("nccl", "NCCL, and the libnccl loaded vs torch's", r.check_nccl, static=False, uses_probe=True),
    Check("rdma", "RDMA userspace for NCCL (InfiniBand/RoCE/EFA)", r.check_rdma, static=False),
    Check("triton-jit", "A one-kernel Triton program on the GPU", t.check_triton, static=False),
    # runs flash-attn's kernels: needs the runtime (GPU, driver), so never part of the build's --static
    Check("flash-attn", "flash-attn import, and its varlen kernels on a GPU", fa.check_flash_attn, static=False),
    Check("shm", "/dev/shm size", r.check_shm, static=False),
    Check("env-vars", "Environment variables verl relies on or that are traps", r.check_env),
    Check("secrets", "Secrets visible in the environment", r.check_secrets),
    Check("config", "verl config lint (--config)", i.check_config),
)
