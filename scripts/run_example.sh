#!/usr/bin/env bash
# The built-in example, in two parts.
# 1. Will a 12B FLUX.1-Kontext-dev transformer with a LoRA adapter fit a 48 GB RTX
#    A6000 at 1024 px? The run as launched (no checkpointing), the fastest plan
#    that fits, and its HTML report.
# 2. Train with a plan: a tiny Llama with every block checkpointed, on this
#    machine's CPU (or its GPU) through the LibTorch executor, ending with
#    predicted vs measured memory per category and a training-state checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if ! scripts/setup_torch.sh >/dev/null 2>.venv-setup.log; then
  echo "run_example: WARNING: LibTorch could not be installed (see .venv-setup.log); part 2 is skipped" >&2
fi
scripts/build.sh headroom  # the planner, and the trainer with it when LibTorch is there; no tests
mkdir -p out
./build/cli/headroom fit flux-kontext-dev --gpu a6000 --lora --lora-rank 16 --resolution 1024
./build/cli/headroom plan flux-kontext-dev --gpu a6000 --lora --lora-rank 16 --resolution 1024 -o out/flux-kontext-a6000-plan.json
./build/cli/headroom report out/flux-kontext-a6000-plan.json -o out/flux-kontext-a6000-report.html
echo "plan: out/flux-kontext-a6000-plan.json; report (open it in a browser): out/flux-kontext-a6000-report.html"

if [ ! -x build/cli/headroom-train ]; then
  echo "run_example: the trainer (headroom-train) is not built; skipping the training run" >&2
  exit 0
fi
echo
echo "== Training tiny-llama with a checkpoint-every-block plan (headroom run) =="
./build/cli/headroom fit tiny-llama --gpu a6000 --checkpointing every --batch 4 -o out/tiny-llama-plan.json
rm -f out/tiny-llama-metrics.jsonl
./build/cli/headroom run out/tiny-llama-plan.json --steps 40 --lr 3e-3 --checkpoint-dir out/tiny-llama-checkpoints \
  --checkpoint-every 20 --metrics out/tiny-llama-metrics.jsonl --measurement-out out/tiny-llama-measured.json
