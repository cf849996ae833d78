#!/usr/bin/env bash
# A CUDA profile's image (the default; an SGLang one with ROLLOUT=sglang), accepted on a GPU host with
# no container engine, in the image's own filesystem. Run from the repository root on the GPU host, one
# phase per call (each well under the device tool's 10 minutes); only the host's own python3 (standard
# library) runs verlenv outside the tree.
#
#   probe   OUT          what the host has (inventory of its installed distributions), bwrap, driver
#   stash   DIR          copy one carried piece of the pack to /root/stash
#   apply   OUT          make /root/tree from the pack and the host's own files; prove it; doctor in it
#                        (not with APPLY_DOCTOR=0)
#   start   OUT          start `all` in the background (its own session: it outlives the call)
#   wait    OUT          wait (at most 9.5 min) until `all` has finished; print what has
#   collect OUT          pack the results (and earlier batches', /root/results-*) into OUT/results.tar.gz
#   extbuild DIR         start an extension build in the tree, in the background: DIR holds the sdist and
#                        recipe.json (benchmarks/ext_recipe.py: the command and env `verlenv build` uses),
#                        built in /build as in verlenv's container, so its objects resume a build there;
#                        with DIR/build.ninja (a build split by target), only the recipe's targets;
#                        VERLENV_EXT names another build folder than /root/extbuild (two at once)
#   extwait  OUT         wait (at most 9.5 min) for it; objects compiled so far
#   extcollect OUT       its build folder (objects, ninja log) and wheel, xz'd in 15 MiB pieces; the first 6
#   extfetch OUT K       pieces 8 at a time after those (K = 1, 2, ...)
#   all     OUT          verl GRPO per TRAINER_SEEDS and PPO with a critic (GAE) per GAE_SEEDS in parallel,
#                        then the engine's default mode one run at a time: VLLM_CLEAN clean runs and a
#                        1 MiB/step leak (none when VLLM_CLEAN=0); ROLLOUT=sglang for an SGLang image; then
#                        doctor --cluster on one node; then the tree proven again
#
# Results (reports, logs) are written under OUT; benchmarks/README.md says what they showed.
set -euo pipefail
phase=${1:?phase}
out=${2:-/tmp/out}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$repo PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# VERLENV_STASH/VERLENV_TREE: a second image on the same host (an extension's build environment);
# VERLENV_TREES: "TREE BUNDLE ..." of trees made before, whose files `apply` reuses
stash=${VERLENV_STASH:-/root/stash} tree=${VERLENV_TREE:-/root/tree}
verlenv() { python3 -m verlenv "$@"; }
mkdir -p "$out"

bwrap_from_deb() {  # bubblewrap, carried as Debian's .deb (depends on libc6, libcap2, libselinux1 only)
  local deb
  deb=$(ls "$repo"/.carry/tools/bubblewrap_*.deb 2>/dev/null | head -1 || true)
  if [ -n "$deb" ] && [ ! -x /root/bwrap/usr/bin/bwrap ]; then dpkg -x "$deb" /root/bwrap; fi
  if [ -x /root/bwrap/usr/bin/bwrap ]; then export VERLENV_BWRAP=/root/bwrap/usr/bin/bwrap; fi
}

zstd_from_deb() {  # zstd, for packs in zstd (the default), where the host has no zstd program: Debian's
  # zstd and libzstd1 .debs carried in .carry/tools (`apt-get download zstd libzstd1` here)
  command -v zstd > /dev/null && return 0
  local deb
  for deb in "$repo"/.carry/tools/zstd_*.deb "$repo"/.carry/tools/libzstd1_*.deb; do
    if [ -f "$deb" ]; then dpkg -x "$deb" /root/zstd; fi
  done
  if [ -x /root/zstd/usr/bin/zstd ]; then
    mkdir -p /root/zstd/bin
    printf '#!/bin/sh\nLD_LIBRARY_PATH=/root/zstd/usr/lib/x86_64-linux-gnu exec /root/zstd/usr/bin/zstd "$@"\n' \
      > /root/zstd/bin/zstd
    chmod +x /root/zstd/bin/zstd
    export PATH=/root/zstd/bin:$PATH
  fi
}

accept() {  # NAME SUITE-ARGS...: the suite in the tree, report and log kept under OUT
  local name=$1 scratch=${SCRATCH:-/root/scratch/$1} code=0; shift
  verlenv accept-image --rootfs "$tree" --bundle "$stash" --scratch "$scratch" \
    --report-out "$out/$name.json" -- "$@" > "$out/$name.log" 2>&1 || code=$?
  echo "$name exit $code $(date -u +%T)" >> "$out/exits.txt"
}

case $phase in
probe)
  date -u +%FT%TZ > "$out/probe.txt"
  { python3 --version; nvidia-smi -L; nproc; free -g | head -2; df -h /root | tail -1; } >> "$out/probe.txt" 2>&1
  python3 -m verlenv.image.rootfs inventory "$out/inventory.json.gz"
  bwrap_from_deb
  if "${VERLENV_BWRAP:-bwrap}" --ro-bind / / true; then echo "bwrap ok" >> "$out/probe.txt"; fi
  zstd_from_deb
  { command -v zstd && zstd --version; python3 -c 'import zstandard' && echo "zstandard module ok"; } \
    >> "$out/probe.txt" 2>&1 || true
  ;;
stash)
  mkdir -p "$stash"
  cp "${2:?piece folder}"/* "$stash"/
  ls "$stash" | wc -l
  ;;
apply)
  bwrap_from_deb
  zstd_from_deb
  start=$(date +%s)
  # shellcheck disable=SC2086
  python3 -m verlenv.image.rootfs inventory /root/inventory.json.gz ${VERLENV_TREES:-}
  python3 -m verlenv.image.rootfs apply "$stash" "$tree" /root/inventory.json.gz | tee "$out/apply.txt"
  echo "apply+prove: $(( $(date +%s) - start )) s" | tee -a "$out/apply.txt"
  [ "${APPLY_DOCTOR:-1}" = 1 ] || exit 0  # APPLY_DOCTOR=0: a build environment, where doctor has nothing to say
  verlenv rootfs run "$tree" --bundle "$stash" --scratch /root/scratch/doctor --no-verify -- \
    verlenv doctor --json > "$out/doctor.json" 2> "$out/doctor.err" || true
  verlenv rootfs run "$tree" --bundle "$stash" --scratch /root/scratch/doctor --no-verify -- \
    verlenv doctor -v > "$out/doctor.txt" 2>&1 || true
  ;;
all)
  bwrap_from_deb
  # verl GRPO per TRAINER_SEEDS and PPO with a critic (GAE) per GAE_SEEDS, all at once on one GPU, each
  # engine's KV cache sized in bytes (KV_BYTES): vLLM's profile-based sizing counts the other runs'
  # memory changes as its own and refuses to start. Then the vLLM suite one run at a time, sharing a
  # compile cache: VLLM_CLEAN clean runs and one with a 1 MiB/step leak. Alone, because its sleep/wake
  # cycle asserts on device-wide free memory ("Memory usage increased after sleeping" when another
  # process allocates meanwhile: 3 of 6 parallel runs, H200 2026-12-04). Compilation and CUDA graphs
  # stay vLLM's and verl's defaults. TRAINER_ATTN (e.g. sdpa) only for an image without flash-attn.
  # ROLLOUT=sglang (an SGLang image): SGLang sizes its pool from the free memory it saw before loading
  # the model, less (1 - mem_fraction_static) of it, so the fraction is the room other runs may take
  # meanwhile and max_total_tokens (KV_TOKENS) caps what it keeps.
  rollout=${ROLLOUT:-vllm}
  if [ "$rollout" = sglang ]; then
    kv=(--backend sglang --engine-arg "max_total_tokens=${KV_TOKENS:-32768}") share=0.2
  else
    kv=(--backend vllm --engine-arg "kv_cache_memory_bytes=${KV_BYTES:-2147483648}") share=0.06
  fi
  attn=(); [ -n "${TRAINER_ATTN:-}" ] && attn=(--attn "$TRAINER_ATTN")
  verl=(--trainer verl --steps 30 --gpu-memory-utilization "$share" "${kv[@]}" "${attn[@]}")
  for seed in ${TRAINER_SEEDS-0 1 2}; do  # TRAINER_SEEDS="" for none
    accept "verl-grpo-$seed" "${verl[@]}" --estimator grpo --seed "$seed" --workdir "/root/work/grpo-$seed" &
  done
  for seed in ${GAE_SEEDS-0}; do
    accept "verl-gae-$seed" "${verl[@]}" --estimator gae --seed "$seed" --workdir "/root/work/gae-$seed" &
  done
  wait
  engine=(--device cuda --backend vllm --steps 30 --engine-arg gpu_memory_utilization=0.1)
  [ "$rollout" = sglang ] && engine=(--device cuda --backend sglang --steps 30)
  if [ "${VLLM_CLEAN:-5}" -gt 0 ]; then  # VLLM_CLEAN=0: the trainers only (device time is short)
    SCRATCH=/root/scratch/engine accept "$rollout-clean-1" "${engine[@]}" --seed 1
    SCRATCH=/root/scratch/engine accept "$rollout-leak" "${engine[@]}" --seed 99 --no-distributed --inject-leak-mib 1
  fi
  for seed in $(seq 2 "${VLLM_CLEAN:-5}"); do
    SCRATCH=/root/scratch/engine accept "$rollout-clean-$seed" "${engine[@]}" --seed "$seed" --no-distributed
  done
  mkdir -p /root/scratch/cluster/home && cp "$repo/benchmarks/h200_cluster.py" /root/scratch/cluster/home/
  verlenv rootfs run "$tree" --bundle "$stash" --scratch /root/scratch/cluster --no-verify -- \
    python /root/h200_cluster.py /root/cluster > "$out/cluster.log" 2>&1 || true
  cp -r /root/scratch/cluster/home/cluster "$out/cluster" 2>/dev/null || true
  verlenv rootfs verify "$tree" --bundle "$stash" --json > "$out/verify-after.json" 2>&1 || true
  date -u +%FT%TZ > "$out/done"
  ;;
start)
  # a second batch on the same machine: the first one's results move aside, so `wait` waits for this one
  if [ -d /root/results ]; then mv /root/results "/root/results-$(date +%s)"; fi
  mkdir -p /root/results
  setsid nohup bash "$0" all /root/results > /root/results/all.log 2>&1 < /dev/null &
  sleep 5; cat /root/results/all.log
  ;;
wait)
  for _ in $(seq 114); do [ -f /root/results/done ] && break; sleep 5; done
  date -u +%FT%TZ; cat /root/results/exits.txt 2>/dev/null; ls /root/results
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; free -g | head -2
  for f in /root/results/*.log; do echo "== $f"; tail -2 "$f"; done 2>/dev/null | tail -40
  ;;
collect)
  (cd /root && tar czf "$out/results.tar.gz" results results-* 2>/dev/null || tar czf "$out/results.tar.gz" results)
  ls -la "$out"
  ;;
extbuild)
  bwrap_from_deb
  ext=${VERLENV_EXT:-/root/extbuild} recipe=${2:?folder}/recipe.json
  scratch=/root/scratch/$(basename "$ext")  # one per build folder: two builds may run at once
  mkdir -p "$ext/src" "$ext/out" "$tree/build" "$scratch/home"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$(ls "$2"/*.tar.gz)" "$ext/src"
  if [ -f "$2/build.ninja" ]; then  # a build split by target (ext_recipe.py TARGETS): ninja over this file
    folder=$(grep -o -m1 '/build/src/[^ ]*/build/temp[^/]*' "$2/build.ninja")
    mkdir -p "$ext${folder#/build}" && cp "$2/build.ninja" "$ext${folder#/build}/"
  fi
  mapfile -t envs < <(python3 -c 'import json, sys
for k, v in sorted(json.load(open(sys.argv[1]))["env"].items()): print(f"--env={k}={v}")' "$recipe")
  command=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["command"])' "$recipe")
  date +%s > "$ext/started"
  setsid nohup python3 -m verlenv rootfs run "$tree" --bundle "$stash" --scratch "$scratch" --no-verify \
    --bind "$ext:/build" "${envs[@]}" -- bash -c "{ $command; } > /build/build.log 2>&1; echo \$? > /build/exit" \
    > "$ext/run.log" 2>&1 < /dev/null &
  echo $! > "$ext/pid"
  sleep 20; tail -n 3 "$ext/build.log" "$ext/run.log"
  ;;
extwait)
  ext=${VERLENV_EXT:-/root/extbuild}
  for _ in $(seq 114); do
    [ -f "$ext/exit" ] && break
    kill -0 "$(cat "$ext/pid")" 2>/dev/null || { echo "the build's runner is gone:"; tail -n 5 "$ext/run.log"; break; }
    sleep 5
  done
  echo "objects: $(find "$ext/src" -name '*.o' | wc -l); elapsed $(( $(date +%s) - $(cat "$ext/started") )) s"
  cat "$ext/exit" 2>/dev/null; tail -n 3 "$ext/build.log"; ls -la "$ext/out"
  ;;
extcollect)
  ext=${VERLENV_EXT:-/root/extbuild}
  { echo "exit $(cat "$ext/exit")"; echo "seconds $(( $(stat -c %Y "$ext/exit") - $(cat "$ext/started") ))"; nproc; } \
    > "$out/extbuild.txt"
  sha256sum "$ext"/out/*.whl >> "$out/extbuild.txt"
  tail -c 200000 "$ext/build.log" > "$out/build-log-tail.txt"
  top=$(ls "$ext/src")
  mkdir -p /root/extpieces
  tar cf - -C "$ext" "src/$top/build" out | xz -T0 -3 | split -b 15M - /root/extpieces/ext.tar.xz.
  ls /root/extpieces | head -6 | while read -r f; do cp "/root/extpieces/$f" "$out/"; done
  ls -la /root/extpieces "$out"
  ;;
extfetch)  # OUT K: pieces 6+8(K-1) .. 6+8K-1 (six came with extcollect)
  k=${3:?K}
  ls /root/extpieces | tail -n +$(( 7 + 8 * (k - 1) )) | head -8 | while read -r f; do cp "/root/extpieces/$f" "$out/"; done
  ls -la "$out"
  ;;
*)
  echo "unknown phase $phase" >&2
  exit 2
  ;;
esac
