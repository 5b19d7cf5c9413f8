#!/usr/bin/env bash
# GPU validation of the executor against the planner (issue 4): on a machine
# with an NVIDIA GPU and torch 2.11, builds headroom with the executor and runs a
# matrix of models (tiny up to ~3B parameters) x plans (no checkpointing, the
# planner's plan, checkpoint every block; activation offload on and off; bf16),
# then writes predicted vs measured peak reserved memory and step time, with the
# GPU name, driver, torch version and date, to docs/results/.
#
#   bench/gpu_validation.sh [--steps N] [--out DIR]
#
# Targets (docs/executor.md): peak reserved within 3 %, step time within 10 %,
# and the planner's plan faster than "checkpoint every block" under one budget.
# Machines without internet: run scripts/pack_build_deps.sh on a Debian machine
# first and carry .build-deps.tar.gz; this script unpacks it when headers are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=12
out=docs/results
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "gpu_validation: unknown argument $1 (expected --steps N or --out DIR)" >&2; exit 2 ;;
  esac
done

command -v nvidia-smi >/dev/null || { echo "gpu_validation: no nvidia-smi: this needs a machine with an NVIDIA GPU" >&2; exit 1; }
if [ ! -d /usr/include/boost/graph ] && [ -f .build-deps.tar.gz ]; then
  tar -xzf .build-deps.tar.gz -C /   # headers and CMake configs packed by scripts/pack_build_deps.sh
fi

python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
prefix=$($python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
torch_version=$($python -c 'import torch; print(torch.__version__)')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$prefix" -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  -DCMAKE_CUDA_STANDARD=17 "-DTORCH_CUDA_ARCH_LIST=8.0;8.6;8.9;9.0" >/dev/null
cmake --build build-gpu -j"$(nproc)" --target headroom
headroom=build-gpu/cli/headroom

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
gpu_mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
date=$(date -u +%Y-%m-%d)
work=$(mktemp -d)
mkdir -p "$out"

# model | flags | plan kind (fit = as given, plan = the planner's) | label
cases=(
  "tiny-llama|--batch 8 --seq 256|fit|tiny-llama, keep all"
  "tiny-llama|--batch 8 --seq 256 --checkpointing every|fit|tiny-llama, checkpoint every block"
  "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 4|fit|Llama 1B full, keep all"
  "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 4 --checkpointing every|fit|Llama 1B full, checkpoint every block"
  "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 4 --gpu-mem 24GiB|plan|Llama 1B full, planner's plan at 24 GiB"
  "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 4 --gpu-mem 24GiB --checkpointing every|fit|Llama 1B full, checkpoint every block at 24 GiB"
  "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 4 --offload-optimizer cpu --zero 2|fit|Llama 1B, CPU AdamW (ZeRO-Offload)"
  "bench/gpu_models/llama-3b-untied|--seq 2048 --batch 2 --lora|fit|Llama 3B LoRA, keep all"
  "bench/gpu_models/llama-3b-untied|--seq 4096 --batch 2 --lora --gpu-mem 30GiB|plan|Llama 3B LoRA, planner's plan at 30 GiB (offload allowed)"
  "bench/gpu_models/llama-3b-untied|--seq 4096 --batch 2 --lora --gpu-mem 30GiB --no-activation-offload|plan|Llama 3B LoRA, planner's plan at 30 GiB, no offload"
  "tiny-flux|--batch 4 --lora|fit|tiny-flux LoRA"
)
# Several GPUs (issue 11): the ranks meet in NCCL's group, one per GPU of this
# machine; the plan is for that many GPUs and each rank measures its own share.
gpu_count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
if [ "$gpu_count" -ge 2 ]; then
  n=$(( gpu_count < 4 ? gpu_count : 4 ))
  cases+=(
    "tiny-llama|--batch 8 --seq 256 --gpus $n|fit|tiny-llama, DDP on $n GPUs (NCCL)"
    "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 2 --gpus $n --zero 1|fit|Llama 1B, ZeRO-1 on $n GPUs"
    "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 2 --gpus $n --zero 2|fit|Llama 1B, ZeRO-2 on $n GPUs"
    "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 2 --gpus $n --zero 3 --checkpointing every|fit|Llama 1B, ZeRO-3 on $n GPUs, checkpoint every block"
    "bench/gpu_models/llama-1b-untied|--seq 2048 --batch 2 --gpus $n --zero 2 --offload-optimizer cpu|fit|Llama 1B, ZeRO-2 with CPU AdamW on $n GPUs"
  )
fi

results="$work/results.jsonl"
: > "$results"
i=0
for entry in "${cases[@]}"; do
  IFS='|' read -r model flags kind label <<<"$entry"
  i=$((i + 1))
  plan="$work/plan-$i.json"
  # shellcheck disable=SC2086
  if ! $headroom "$kind" "$model" --gpu "$gpu_name" --precision bf16-mixed $flags -o "$plan" >"$work/plan-$i.txt" 2>&1; then
    echo "case $i ($label): no plan: $(tail -1 "$work/plan-$i.txt")" >&2
    continue
  fi
  ranks=$(grep -o -- '--gpus [0-9]*' <<<"$flags" | awk '{print $2}')
  nproc_flag=()
  [ -n "$ranks" ] && nproc_flag=(--nproc "$ranks")
  if ! $headroom run "$plan" --steps "$steps" --device cuda "${nproc_flag[@]}" --measurement-out "$work/measured-$i.json" --json \
        >"$work/run-$i.json" 2>"$work/run-$i.log"; then
    echo "case $i ($label): run failed: $(tail -1 "$work/run-$i.log")" >&2
    continue
  fi
  $python - "$plan" "$work/measured-$i.json" "$label" >>"$results" <<'EOF'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
measured = json.load(open(sys.argv[2]))
steps = measured["steps"]
warm = steps[1:] if len(steps) > 1 else steps
prediction = plan["prediction"]
print(json.dumps({
    "case": sys.argv[3],
    "predicted_peak_reserved_bytes": prediction["peak_reserved_bytes"],
    "measured_peak_reserved_bytes": max(s["peak_reserved_bytes"] for s in steps),
    "predicted_step_ms": prediction["time"]["step_ms"],
    "measured_step_ms": statistics.median(s["step_ms"] for s in warm),
}))
EOF
done

stem="$out/gpu-validation-$date"
$python - "$results" "$stem" "$gpu_name" "$driver" "$torch_version" "$date" "$gpu_mem_mib" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
stem, gpu, driver, torch_version, date, mem = sys.argv[2:8]
doc = {"gpu": gpu, "driver": driver, "torch": torch_version, "date": date, "gpu_memory_mib": int(mem), "cases": rows}
json.dump(doc, open(stem + ".json", "w"), indent=2)
with open(stem + ".md", "w") as f:
    f.write(f"# GPU validation, {date}\n\n{gpu} ({mem} MiB), driver {driver}, torch {torch_version}.\n")
    f.write("Written by bench/gpu_validation.sh. Targets: peak reserved within 3 %, step time within 10 %.\n\n")
    f.write("| case | peak reserved predicted | measured | error | step ms predicted | measured | error |\n")
    f.write("|---|---|---|---|---|---|---|\n")
    for r in rows:
        pe = (r["predicted_peak_reserved_bytes"] - r["measured_peak_reserved_bytes"]) / r["measured_peak_reserved_bytes"]
        te = (r["predicted_step_ms"] - r["measured_step_ms"]) / r["measured_step_ms"]
        f.write(f"| {r['case']} | {r['predicted_peak_reserved_bytes'] / 2**30:.2f} GiB | "
                f"{r['measured_peak_reserved_bytes'] / 2**30:.2f} GiB | {100 * pe:+.1f} % | "
                f"{r['predicted_step_ms']:.1f} | {r['measured_step_ms']:.1f} | {100 * te:+.1f} % |\n")
print(open(stem + ".md").read())
EOF
echo "gpu_validation: results in $stem.md and $stem.json"
