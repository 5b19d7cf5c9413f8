#!/usr/bin/env bash
# CTest exporter/end_to_end: the exporter writes graphs from two public configs
# alone (transformers Llama-3.2-1B, diffusers FLUX.1-dev transformer) on the
# meta device, offline, and headroom fits and plans them; bad input gets one
# message and a non-zero exit, never a traceback. Exit 77 (skip) without the
# exporter's Python packages (scripts/setup_exporter.sh).
#   end_to_end.sh HEADROOM_BINARY OUT_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
headroom="$1"
out="$2"
python="$root/.venv/bin/python"
export="$root/scripts/exporter/export_graph.py"
if [ ! -x "$python" ] || ! "$python" -c 'import torch, transformers, diffusers' 2>/dev/null; then
  echo "end_to_end: skipped: torch/transformers/diffusers not in .venv (scripts/setup_exporter.sh)"
  exit 77
fi
rm -rf "$out" && mkdir -p "$out"
export HF_HUB_OFFLINE=1

# Llama-3.2-1B in full fine-tuning, FLUX.1-dev with LoRA (its full fine-tuning needs
# more than one 48 GB GPU): both must fit an A6000 with a plan.
for run in "llama-3.2-1b full" "flux.1-dev-transformer lora"; do
  set -- $run
  model="$1" mode="$2"
  "$python" "$export" "$root/tests/data/hf/$model/config.json" -o "$out/$model.json"
  "$headroom" fit "$out/$model.json" --gpu a6000 --mode "$mode" --json > "$out/$model.fit.json"
  "$headroom" plan "$out/$model.json" --gpu a6000 --mode "$mode" > "$out/$model.plan.txt"
  # The verdict is the first line that starts with one (after the run and stack lines).
  verdict=$(grep -m1 -E "^(FITS|TIGHT|DOES NOT FIT)" "$out/$model.plan.txt" || true)
  if [ "${verdict#FITS}" = "$verdict" ]; then
    echo "end_to_end: $model ($mode): headroom found no plan:"
    head -5 "$out/$model.plan.txt"
    exit 1
  fi
  echo "end_to_end: $model ($mode): exported, fitted and planned: $verdict"
done

# Bad input: one line naming the file, exit 2, no Python traceback.
expect_refusal() {
  local what="$1" input="$2" pattern="$3" status=0
  "$python" "$export" "$input" -o "$out/bad.json" > "$out/bad.out" 2>&1 || status=$?
  if [ "$status" -ne 2 ] || grep -q Traceback "$out/bad.out" || ! grep -q -- "$pattern" "$out/bad.out"; then
    echo "end_to_end: $what: expected exit 2 and a message matching '$pattern', got $status:"
    cat "$out/bad.out"
    exit 1
  fi
  echo "end_to_end: $what refused: $(cat "$out/bad.out")"
}
expect_refusal "missing file" "$out/none/config.json" "no such file"
echo '{"model_type": "llama", ' > "$out/truncated.json"
expect_refusal "invalid JSON" "$out/truncated.json" "invalid JSON"
echo '{"model_type": "no_such_family"}' > "$out/unknown.json"
expect_refusal "unknown model_type" "$out/unknown.json" "no_such_family"
echo '{"_class_name": "UNet2DConditionModel"}' > "$out/unet.json"
expect_refusal "unsupported diffusers class" "$out/unet.json" "FluxTransformer2DModel"
expect_refusal "encoder-decoder (two sequence lengths)" "$root/tests/data/hf/flan-t5-base/config.json" "--target-seq"
