#!/usr/bin/env bash
# The default profile's image, accepted on a GPU host with no container engine, in the image's own
# filesystem. Run from the repository root on the GPU host, one phase per call (each well under the
# device tool's 10 minutes); only the host's own python3 (standard library) runs verlenv outside the tree.
#
#   probe   OUT          what the host has (inventory of its installed distributions), bwrap, driver
#   stash   DIR          copy one carried piece of the pack to /root/stash
#   apply   OUT          make /root/tree from the pack and the host's own files; prove it; doctor in it
#   phase1  OUT          vLLM default mode: 3 clean runs and a 1 MiB/step leak; verl GRPO x3 (parallel)
#   phase2  OUT          verl PPO with a critic (GAE) x3; doctor --cluster on one node; tree re-proven
#
# Results (reports, logs) are written under OUT; benchmarks/README.md says what they showed.
set -euo pipefail
phase=${1:?phase}
out=${2:-/tmp/out}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$repo PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stash=/root/stash tree=/root/tree
verlenv() { python3 -m verlenv "$@"; }
mkdir -p "$out"

bwrap_from_deb() {  # bubblewrap, carried as Debian's .deb (depends on libc6, libcap2, libselinux1 only)
  local deb
  deb=$(ls "$repo"/.carry/tools/bubblewrap_*.deb 2>/dev/null | head -1 || true)
  if [ -n "$deb" ] && [ ! -x /root/bwrap/usr/bin/bwrap ]; then dpkg -x "$deb" /root/bwrap; fi
  if [ -x /root/bwrap/usr/bin/bwrap ]; then export VERLENV_BWRAP=/root/bwrap/usr/bin/bwrap; fi
}

accept() {  # NAME SUITE-ARGS...: the suite in the tree, report and log kept under OUT
  local name=$1; shift
  verlenv accept-image --rootfs "$tree" --bundle "$stash" --scratch "/root/scratch/$name" \
    --report-out "$out/$name.json" -- "$@" > "$out/$name.log" 2>&1
  echo "$name exit $?" >> "$out/exits.txt"
}

case $phase in
probe)
  date -u +%FT%TZ > "$out/probe.txt"
  { python3 --version; nvidia-smi -L; nproc; free -g | head -2; df -h /root | tail -1; } >> "$out/probe.txt" 2>&1
  python3 -m verlenv.image.rootfs inventory "$out/inventory.json.gz"
  bwrap_from_deb
  if "${VERLENV_BWRAP:-bwrap}" --ro-bind / / true; then echo "bwrap ok" >> "$out/probe.txt"; fi
  ;;
stash)
  mkdir -p "$stash"
  cp "${2:?piece folder}"/* "$stash"/
  ls "$stash" | wc -l
  ;;
apply)
  bwrap_from_deb
  start=$(date +%s)
  python3 -m verlenv.image.rootfs inventory /root/inventory.json.gz
  python3 -m verlenv.image.rootfs apply "$stash" "$tree" /root/inventory.json.gz | tee "$out/apply.txt"
  echo "apply+prove: $(( $(date +%s) - start )) s" | tee -a "$out/apply.txt"
  verlenv rootfs run "$tree" --bundle "$stash" --scratch /root/scratch/doctor --no-verify -- \
    verlenv doctor --json > "$out/doctor.json" 2> "$out/doctor.err" || true
  verlenv rootfs run "$tree" --bundle "$stash" --scratch /root/scratch/doctor --no-verify -- \
    verlenv doctor -v > "$out/doctor.txt" 2>&1 || true
  ;;
phase1)
  bwrap_from_deb
  vllm=(--device cuda --backend vllm --steps 30 --engine-arg gpu_memory_utilization=0.08)
  accept vllm-clean-1 "${vllm[@]}" --seed 1 &
  accept vllm-clean-2 "${vllm[@]}" --seed 2 --no-distributed &
  accept vllm-clean-3 "${vllm[@]}" --seed 3 --no-distributed &
  accept vllm-leak "${vllm[@]}" --seed 4 --no-distributed --inject-leak-mib 1 &
  for seed in 0 1 2; do
    accept "verl-grpo-$seed" --trainer verl --estimator grpo --steps 30 --seed "$seed" \
      --gpu-memory-utilization 0.08 --workdir "/root/work/grpo-$seed" &
  done
  wait
  ;;
phase2)
  bwrap_from_deb
  for seed in 0 1 2; do
    accept "verl-gae-$seed" --trainer verl --estimator gae --steps 30 --seed "$seed" \
      --gpu-memory-utilization 0.1 --workdir "/root/work/gae-$seed" &
  done
  wait
  mkdir -p /root/scratch/cluster/home && cp "$repo/benchmarks/h200_cluster.py" /root/scratch/cluster/home/
  verlenv rootfs run "$tree" --bundle "$stash" --scratch /root/scratch/cluster --no-verify -- \
    python /root/h200_cluster.py /root/cluster > "$out/cluster.log" 2>&1 || true
  cp -r /root/scratch/cluster/home/cluster "$out/cluster" 2>/dev/null || true
  verlenv rootfs verify "$tree" --bundle "$stash" --json > "$out/verify-after.json" 2>&1 || true
  ;;
*)
  echo "unknown phase $phase" >&2
  exit 2
  ;;
esac
