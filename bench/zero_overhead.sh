#!/usr/bin/env bash
# Step-time overhead of data parallelism, ZeRO-1, ZeRO-2 and ZeRO-3 over one process
# training the same global batch (issue 11), measured in one run on this
# machine's CPU with Gloo: tiny-llama, fp32, every block checkpointed, global
# batch 8 (micro-batch 2). Prints each job's median step time and its ratio to
# the one-process run. On a machine with fewer cores than ranks the ranks share
# cores, so the ratio is an upper bound on the communication's cost.
#   bench/zero_overhead.sh [BUILD_DIR] [STEPS] [RANKS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-30}
ranks=${3:-2}
headroom="$build/cli/headroom"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Median of the step times after the first (which includes start-up).
median_ms() {
  python3 -c 'import json,sys,statistics; t=[json.loads(l)["step_ms"] for l in open(sys.argv[1])][1:]; print(f"{statistics.median(t):.1f}")' "$1"
}

run_job() {  # name zero gpus accum [run flags...]
  local name=$1 zero=$2 gpus=$3 accum=$4
  shift 4
  "$headroom" fit tiny-llama --gpu a6000 --precision fp32 --checkpointing every --micro-batch 2 --grad-accum "$accum" \
    --gpus "$gpus" --zero "$zero" -o "$work/$name.json" >/dev/null
  "$headroom" run "$work/$name.json" --device cpu --cpu-threads 1 --steps "$steps" --metrics "$work/$name.jsonl" "$@" \
    >/dev/null 2>&1
  median_ms "$work/$name.jsonl"
}

export OMP_NUM_THREADS=1
base=$(run_job single 0 1 4)
printf '%-28s %10s %8s\n' "job (global batch 8)" "step ms" "ratio"
printf '%-28s %10s %8s\n' "1 process" "$base" "1.00"
for zero in 0 1 2 3; do
  ms=$(run_job "zero$zero" "$zero" "$ranks" $((4 / ranks)) --nproc "$ranks")
  printf '%-28s %10s %8s\n' "$ranks ranks, ZeRO-$zero" "$ms" "$(python3 -c "print(f'{$ms/$base:.2f}')")"
done
