#!/usr/bin/env bash
# CTest exporter/mmengine_loader: MMEngine's own loader reads the XTuner configs in
# tests/data/xtuner and the mmpretrain ones in tests/data/mmpretrain/configs
# (scripts/exporter/read_mmengine_config.py, lazy imports: no xtuner, peft or
# bitsandbytes needed) and prints what the checked-in dumps hold, which the
# planner tests read; `headroom fit --xtuner CONFIG.py` runs the loader itself;
# `--emit mmengine`'s --cfg-options, applied by MMEngine, read back as the plan; a
# config MMEngine cannot load is one message naming it and a non-zero exit. Exit 77 (skip) without mmengine in .venv (scripts/setup_exporter.sh).
#   mmengine_loader.sh HEADROOM_BINARY OUT_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
headroom="$1"
out="$2"
python="$root/.venv/bin/python"
loader="$root/scripts/exporter/read_mmengine_config.py"
if [ ! -x "$python" ] || ! "$python" -c 'import mmengine.config' 2>/dev/null; then
  echo "mmengine_loader: skipped: mmengine not in .venv (scripts/setup_exporter.sh)"
  exit 77
fi
rm -rf "$out" && mkdir -p "$out"
data="$root/tests/data/xtuner"
checked=0
for config in "$data"/*.py; do
  name="$(basename "$config" .py)"
  "$python" "$loader" "$config" > "$out/$name.dump.json"
  # The config part must equal the checked-in dump (the file path may differ).
  "$python" - "$out/$name.dump.json" "$data/$name.dump.json" <<'PY'
import json, sys
fresh, kept = (json.load(open(p))["config"] for p in sys.argv[1:3])
if fresh != kept:
    sys.exit(f"mmengine_loader: {sys.argv[2]} is stale: the loader now prints another config")
PY
  checked=$((checked + 1))
done
if [ "$checked" -lt 2 ]; then
  echo "mmengine_loader: expected the 2 XTuner configs in $data, found $checked"
  exit 1
fi
# mmpretrain's configs (with their _base_ files) likewise.
pretrain="$root/tests/data/mmpretrain"
for config in "$pretrain"/configs/resnet/*.py; do
  name="$(basename "$config" .py)"
  "$python" "$loader" "$config" > "$out/$name.dump.json"
  "$python" - "$out/$name.dump.json" "$pretrain/$name.dump.json" <<'PY'
import json, sys
fresh, kept = (json.load(open(p))["config"] for p in sys.argv[1:3])
if fresh != kept:
    sys.exit(f"mmengine_loader: {sys.argv[2]} is stale: the loader now prints another config")
PY
  checked=$((checked + 1))
done
if [ "$checked" -lt 6 ]; then
  echo "mmengine_loader: expected the 4 mmpretrain configs in $pretrain/configs/resnet, found $((checked - 2))"
  exit 1
fi

# headroom runs the loader itself for a .py and answers for the run.
"$headroom" fit llava-llama-3-8b --xtuner "$data/llava_llama3_8b_qlora_finetune.py" \
  --deepspeed "$data/deepspeed_zero2_offload.json" --gpu 4090 --json > "$out/llava.fit.json" 2> "$out/llava.fit.err"
"$python" - "$out/llava.fit.json" <<'PY'
import json, sys
fit = json.load(open(sys.argv[1]))
settings = fit["as_given"]["settings"]
assert settings["mode"] == "qlora" and settings["lora"]["rank"] == 512, settings["lora"]
assert settings["scoped_lora"][0]["rank"] == 64, settings.get("scoped_lora")
assert settings["precision"] == "bf16-mixed" and settings["zero_stage"] == 2, settings
assert fit["fits"], "the seed run should fit a 24 GB GPU"
PY

# The plan written back (--emit xtuner), applied with patch(1) to a copy of the
# config, and the copy read again by MMEngine: it is the plan.
cp "$data/llama3_8b_instruct_qlora_alpaca_e3.py" "$out/sft.py"
run=(llama-3-8b --gpu 4090 --gpu-mem 18GiB --no-offload --max-zero 0 --versions bitsandbytes=0.50.2 --xtuner "$out/sft.py")
"$headroom" plan "${run[@]}" --batch 4 --json -o "$out/sft.plan.json" --emit xtuner="$out/sft.patch" > /dev/null 2>&1
patch --quiet "$out/sft.py" < "$out/sft.patch"
"$headroom" fit "${run[@]}" --json > "$out/sft.after.json" 2> /dev/null
"$python" - "$out/sft.plan.json" "$out/sft.after.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["config"]
after = json.load(open(sys.argv[2]))["as_given"]["settings"]
assert (after["micro_batch"], after["grad_accum"]) == (plan["micro_batch"], plan["grad_accum"]), (plan, after)
PY

# mmpretrain: `plan --mmengine CONFIG.py --emit mmengine` gives --cfg-options for
# tools/train.py; MMEngine applies them (DictAction, merge_from_dict) and the
# config it then prints reads back as the plan.
resnet="$pretrain/configs/resnet/resnet50_8xb32_in1k.py"
run=(--gpu 4090 --gpu-mem 3GiB --fixed-micro-batch)
"$headroom" plan "${run[@]}" --mmengine "$resnet" --json -o "$out/resnet.plan.json" \
  --emit mmengine="$out/resnet.cfg-options" > /dev/null 2>&1
read -r -a options <<< "$(sed -n 's/^# python tools\/train.py [^ ]* --cfg-options //p' "$out/resnet.cfg-options")"
if [ "${#options[@]}" -lt 1 ]; then
  echo "mmengine_loader: --emit mmengine wrote no --cfg-options:"
  cat "$out/resnet.cfg-options"
  exit 1
fi
"$python" "$loader" "$resnet" --cfg-options "${options[@]}" > "$out/resnet.after.dump.json"
"$headroom" fit "${run[@]}" --mmengine "$out/resnet.after.dump.json" --json > "$out/resnet.after.json" 2> /dev/null
"$python" - "$out/resnet.plan.json" "$out/resnet.after.json" "${options[@]}" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
after = json.load(open(sys.argv[2]))["as_given"]["settings"]
config = plan["config"]
assert (after["micro_batch"], after["grad_accum"]) == (config["micro_batch"], config["grad_accum"]), (config, after)
checkpointed = any(b["choice"] != "keep" for b in plan["blocks"])
assert (after["checkpointing"] != "none") == checkpointed, (after["checkpointing"], sys.argv[3:])
PY

# A config MMEngine cannot load: one message naming it, exit 2, no traceback.
printf 'model = dict(type=\n' > "$out/broken.py"
set +e
"$headroom" fit llama-3-8b --xtuner "$out/broken.py" --gpu 4090 > /dev/null 2> "$out/broken.err"
status=$?
set -e
if [ "$status" -ne 2 ] || ! grep -q "broken.py" "$out/broken.err" || grep -q "Traceback" "$out/broken.err"; then
  echo "mmengine_loader: a broken config gave exit $status and:"
  cat "$out/broken.err"
  exit 1
fi
echo "mmengine_loader: $checked XTuner and mmpretrain configs read by MMEngine match their dumps; --xtuner CONFIG.py answers; --emit mmengine reads back as the plan"
