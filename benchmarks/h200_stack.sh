#!/usr/bin/env bash
# The default profile's real stack on a GPU host with no Docker and no network, from a bundle made
# by `verlenv bundle --python 3.12` (see benchmarks/README.md, "The real stack on the H200").
# Every step writes what it saw under $OUT and never stops the next one from running.
#
#   benchmarks/h200_stack.sh stash PIECE   copy a carried bundle piece into $STASH (parts, bundle.json, install.py)
#   benchmarks/h200_stack.sh facts         interpreter, torch, driver, GPU and pip list of the host
#   benchmarks/h200_stack.sh install       python3 $STASH/install.py $VENV: reuse torch & nvidia-* from python3
#   benchmarks/h200_stack.sh doctor        verlenv doctor, as a table and as JSON
#   benchmarks/h200_stack.sh accept        vLLM-rollout acceptance: clean run with the distributed smoke + a leak
#   benchmarks/h200_stack.sh reps N        N more clean vLLM-rollout runs (other seeds)
#   benchmarks/h200_stack.sh verl          verl's own trainer (main_ppo: FSDP, vLLM rollout) on the tiny model
#   benchmarks/h200_stack.sh clean         verlenv clean over the installed tree
#   benchmarks/h200_stack.sh sglang-install   the SGLang bundle ($SGL_STASH) into $SGL_VENV, reusing the vLLM venv
#   benchmarks/h200_stack.sh sglang-doctor    verlenv doctor in $SGL_VENV
#   benchmarks/h200_stack.sh sglang-accept TAG [--engine-arg K=V ...] [accept options]
#                                             SGLang-rollout acceptance, report accept-sglang-TAG.json
set -uo pipefail
STASH=${STASH:-/root/stash}
VENV=${VENV:-/root/venv}
SGL_STASH=${SGL_STASH:-/root/stash-sgl}
SGL_VENV=${SGL_VENV:-/root/sgl-venv}
OUT=${OUT:-/tmp/verlenv-out}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# verlenv from this checkout (newer than the wheel in the bundle), the stack from the venv.
verlenv() { PYTHONPATH="$HERE" "$VENV/bin/python" -m verlenv "$@"; }
sgl_verlenv() { PYTHONPATH="$HERE" "$SGL_VENV/bin/python" -m verlenv "$@"; }
stamp() { echo "# $(date -u +%FT%TZ) $*" | tee -a "$OUT/commands.txt"; }

case "${1:-}" in
stash)
    mkdir -p "$STASH/parts"
    cp "$2"/bundle.tar.* "$STASH/parts/" 2>/dev/null
    cp "$2"/bundle.json "$2"/install.py "$STASH/" 2>/dev/null
    ls "$STASH/parts" | wc -l
    ;;
sglang-install)
    stamp "python3 $SGL_STASH/install.py $SGL_VENV --reuse-from $VENV/bin/python"
    ( time python3 "$SGL_STASH/install.py" "$SGL_VENV" --reuse-from "$VENV/bin/python" ) >"$OUT/sglang-install.log" 2>&1
    echo "sglang install exit $?"; tail -8 "$OUT/sglang-install.log"
    ;;
sglang-doctor)
    stamp "(sgl-venv) verlenv doctor -v; verlenv doctor --json"
    ( time sgl_verlenv doctor -v ) >"$OUT/sglang-doctor.txt" 2>&1; echo "doctor exit $?"
    sgl_verlenv doctor --json >"$OUT/sglang-doctor.json" 2>"$OUT/sglang-doctor.err"
    cat "$OUT/sglang-doctor.txt"
    ;;
sglang-accept)
    tag=$2
    stamp "(sgl-venv) verlenv accept --backend sglang --device cuda ${*:3}"
    sgl_verlenv accept --backend sglang --device cuda --report "$OUT/accept-sglang-$tag.json" "${@:3}" \
        >"$OUT/accept-sglang-$tag.log" 2>&1
    echo "sglang accept exit $?"; tail -40 "$OUT/accept-sglang-$tag.log"
    ;;
facts)
    stamp facts
    { python3 -V; command -v python3; nproc; free -g; df -h / /dev/shm; nvidia-smi; } >"$OUT/facts.txt" 2>&1
    python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' >>"$OUT/facts.txt" 2>&1
    python3 -m pip list --format=freeze >"$OUT/piplist.txt" 2>&1
    tail -5 "$OUT/facts.txt"
    ;;
install)
    stamp "python3 $STASH/install.py $VENV ${*:2}"
    ( time python3 "$STASH/install.py" "$VENV" "${@:2}" ) >"$OUT/install.log" 2>&1
    echo "install exit $?"; tail -15 "$OUT/install.log"
    ;;
doctor)
    stamp "verlenv doctor -v; verlenv doctor --json"
    ( time verlenv doctor -v ) >"$OUT/doctor.txt" 2>&1; echo "doctor exit $?"
    verlenv doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.err"; echo "doctor --json exit $?"
    cat "$OUT/doctor.txt"
    ;;
accept)
    stamp "verlenv accept --backend vllm --device cuda --steps 30 (with smoke), then --inject-leak-mib 1"
    verlenv accept --backend vllm --device cuda --steps 30 --report "$OUT/accept-vllm-clean-0.json" \
        >"$OUT/accept-vllm-clean-0.log" 2>&1
    echo "clean exit $?"; tail -25 "$OUT/accept-vllm-clean-0.log"
    verlenv accept --backend vllm --device cuda --steps 30 --no-distributed --inject-leak-mib 1 \
        --report "$OUT/accept-vllm-leak.json" >"$OUT/accept-vllm-leak.log" 2>&1
    echo "leak exit $? (1 expected: the gate must fire)"; tail -14 "$OUT/accept-vllm-leak.log"
    ;;
reps)
    stamp "benchmarks/accept_vllm.py --reps ${2:-5} --leaks 0 --first-seed 1"
    PYTHONPATH="$HERE" "$VENV/bin/python" "$HERE/benchmarks/accept_vllm.py" --out "$OUT/reps" --reps "${2:-5}" \
        --leaks 0 --first-seed 1 2>&1 | tee "$OUT/reps.txt"
    ;;
verl)
    stamp "verlenv accept --trainer verl --steps ${2:-20}"
    verlenv accept --trainer verl --steps "${2:-20}" --workdir /root/verl-run --report "$OUT/accept-verl.json" \
        >"$OUT/accept-verl.log" 2>&1
    echo "verl exit $?"; grep -v "^\[verl\] " "$OUT/accept-verl.log" | tail -30
    cp /root/verl-run/metrics.jsonl "$OUT/verl-metrics.jsonl" 2>/dev/null
    ;;
clean)
    stamp "verlenv clean --json (the real vLLM tree)"
    verlenv clean --json >"$OUT/clean.json" 2>&1; echo "clean exit $?"; head -40 "$OUT/clean.json"
    ;;
*)
    sed -n '2,16p' "$0"; exit 2
    ;;
esac
