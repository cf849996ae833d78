#!/usr/bin/env bash
# Build host side of benchmarks/h200_stack.sh: the two cp312 bundles that carry the default
# profile's vLLM stack and the SGLang profile's stack to a GPU host that has Python 3.12 and
# torch 2.11.0+cu130 but no network (see benchmarks/README.md, "The real stack on the H200").
#
#   benchmarks/h200_bundles.sh OUTDIR     writes OUTDIR/vllm and OUTDIR/sglang, parts of <= 58 MiB
#
# vllm:   leaves torch, torchvision, torchaudio, triton and the host's nvidia-* libraries to the
#         host (reused from its python3) and omits what neither vLLM's rollout nor verl's FSDP
#         trainer import (JIT compilers, CUTLASS DSL, prebuilt flashinfer cubins; README).
# sglang: leaves everything the vLLM venv already holds at the same version to that venv
#         (install with --reuse-from VLLM_VENV/bin/python), so only SGLang's own closure travels.
set -euo pipefail
OUT=${1:?usage: h200_bundles.sh OUTDIR}
HERE=$(cd "$(dirname "$0")/.." && pwd)
VLLM=verl0.9.1-vllm0.24.0-torch2.11.0-cu130
SGLANG=verl0.9.1-sglang0.5.12-torch2.11.0-cu130
HOST_HAS=(torch torchvision torchaudio triton nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
    nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
    nvidia-cusparse nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx)
NOBODY_IMPORTS=(flashinfer-cubin 'nvidia-cutlass-dsl*' 'tokenspeed-*' tilelang z3-solver nvidia-nvvm
    nvidia-cuda-nvcc nvidia-cuda-tileiras nvidia-cuda-crt nvidia-cuda-cccl quack-kernels humming-kernels)
verlenv() { (cd "$HERE" && python -m verlenv "$@"); }
flags() { local flag=$1; shift; for x in "$@"; do printf '%s\n%s\n' "$flag" "$x"; done; }

mapfile -t vllm_flags < <(flags --exclude "${HOST_HAS[@]}"; flags --omit "${NOBODY_IMPORTS[@]}")
verlenv bundle --profile "$VLLM" --python 3.12 "$OUT/vllm" "${vllm_flags[@]}"

# What the vLLM venv will hold: its lock's pins, less what the vLLM bundle omitted.
mapfile -t in_vllm_venv < <(python - "$HERE/lockfiles" "$VLLM" "$SGLANG" "$OUT/vllm/bundle.json" <<'PY'
import json, re, sys
from pathlib import Path
pins = lambda name: dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", (Path(sys.argv[1]) / f"{name}.lock").read_text(), re.M))
vllm, sglang = pins(sys.argv[2]), pins(sys.argv[3])
omitted = json.loads(Path(sys.argv[4]).read_text())["omitted"]
keep = {"packaging", "pyelftools", "pip"}  # install.py runs verlenv and pip from these wheels
print("\n".join(n for n, v in sglang.items() if vllm.get(n) == v and n not in omitted and n not in keep))
PY
)
mapfile -t sglang_flags < <(flags --exclude "${in_vllm_venv[@]}"; flags --omit "${NOBODY_IMPORTS[@]}" flash-attn-4)
verlenv bundle --profile "$SGLANG" --python 3.12 "$OUT/sglang" "${sglang_flags[@]}"
