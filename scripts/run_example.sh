#!/usr/bin/env bash
# The built-in example: a 12B FLUX.1-Kontext-dev transformer with a LoRA adapter on
# a 48 GB RTX A6000 at 1024 px. Answers "will it fit?" for the run as launched
# (no checkpointing), then computes the fastest plan that fits and writes it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
mkdir -p out
./build/cli/headroom fit flux-kontext-dev --gpu a6000 --lora --lora-rank 16 --resolution 1024
./build/cli/headroom plan flux-kontext-dev --gpu a6000 --lora --lora-rank 16 --resolution 1024 -o out/flux-kontext-a6000-plan.json
./build/cli/headroom report out/flux-kontext-a6000-plan.json -o out/flux-kontext-a6000-report.html
echo "plan: out/flux-kontext-a6000-plan.json; report (open it in a browser): out/flux-kontext-a6000-report.html"
