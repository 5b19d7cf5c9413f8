#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UBSan) and runs each for a
# bounded time: FUZZ_SECONDS (default 60) per target; FUZZ_TARGETS (default: all)
# names a subset. Seeds come from tests/data; crashes are written to
# out/fuzz/<target>/crashes/ and the script fails. Inputs that once crashed are kept
# in tests/data/fuzz_regressions/<target>/ and replayed first. The last line of each
# target's log (runs, coverage) is printed; the CI job .ci/fuzz runs them all for 10
# minutes each (label "fuzz", docs/cli.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ missing (apt-get install clang)" >&2; exit 2; }
build=out/fuzz/build
mkdir -p "$build/obj"
common=(-std=c++20 -O1 -g -I.)
sanitizers=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)

graph_sources=(graph/dtype.cc graph/size_expr.cc graph/layer_graph.cc graph/validate.cc graph/graph_json.cc
               graph/json_text.cc graph/atomic_file.cc graph/graph_analysis.cc graph/safetensors_header.cc graph/utf8.cc)
model_sources=(models/*.cc)
# The readers' side of the planner and executor: what settings, plans, DeepSpeed
# configs and run states need (the whole settings room), without the model
# builders or the solver.
reader_sources=(planner/settings/*.cc planner/predict/plan.cc planner/configs/deepspeed_import.cc
                planner/predict/measurement.cc executor/run_state.cc planner/configs/config_import.cc)

# Each source is compiled once (instrumented for coverage, not linked with the
# fuzzer main) and reused by every target that needs it.
objects() {
  local out=()
  for source in "$@"; do
    local object="$build/obj/${source//\//_}.o"
    if [ ! -f "$object" ] || [ "$source" -nt "$object" ]; then
      clang++ "${common[@]}" -fsanitize=fuzzer-no-link "${sanitizers[@]}" -c "$source" -o "$object"
    fi
    out+=("$object")
  done
  echo "${out[@]}"
}

declare -A sources=(
  [fuzz_graph_json]="${graph_sources[*]}"
  [fuzz_safetensors]="${graph_sources[*]}"
  [fuzz_measurement]="${graph_sources[*]} planner/predict/measurement.cc"
  [fuzz_hf_config]="${graph_sources[*]} ${model_sources[*]}"
  [fuzz_deepspeed]="${graph_sources[*]} ${reader_sources[*]}"
  [fuzz_settings]="${graph_sources[*]} ${reader_sources[*]}"
  [fuzz_plan]="${graph_sources[*]} ${reader_sources[*]}"
  [fuzz_run_state]="${graph_sources[*]} ${reader_sources[*]}"
  [fuzz_torchtune]="${graph_sources[*]} ${reader_sources[*]} ${model_sources[*]} planner/configs/yaml_config.cc planner/configs/torchtune_import.cc planner/configs/accelerate_import.cc"
  [fuzz_hf_trainer]="${graph_sources[*]} ${reader_sources[*]} planner/configs/hf_trainer_import.cc planner/configs/args_reader.cc planner/configs/training_args_text.cc planner/configs/trl_model_args.cc planner/configs/peft_import.cc planner/configs/yaml_config.cc planner/configs/axolotl_import.cc planner/configs/llamafactory_import.cc"
  [fuzz_torchtune_set]="${graph_sources[*]} ${reader_sources[*]} ${model_sources[*]} planner/configs/yaml_config.cc planner/configs/torchtune_import.cc"
  [fuzz_mmengine_dump]="${graph_sources[*]} ${reader_sources[*]} ${model_sources[*]} planner/configs/mmengine_config.cc planner/configs/mmengine_import.cc planner/configs/xtuner_import.cc planner/configs/mmpretrain_import.cc"
)
# Libraries a target links beyond the sources (libyaml, Debian's libyaml-dev).
declare -A libraries=([fuzz_torchtune]="-lyaml" [fuzz_hf_trainer]="-lyaml" [fuzz_torchtune_set]="-lyaml")
all_targets=(fuzz_graph_json fuzz_safetensors fuzz_hf_config fuzz_measurement fuzz_deepspeed fuzz_settings fuzz_plan
             fuzz_run_state fuzz_torchtune fuzz_hf_trainer fuzz_torchtune_set fuzz_mmengine_dump)
read -r -a targets <<< "${FUZZ_TARGETS:-${all_targets[*]}}"

seed() {
  local target=$1 corpus=$2
  case $target in
    fuzz_graph_json) cp tests/data/*.json "$corpus/" 2>/dev/null || true ;;
    fuzz_hf_config) for f in tests/data/hf/*/config.json; do cp "$f" "$corpus/$(basename "$(dirname "$f")").json"; done ;;
    fuzz_measurement) cp tests/data/measurement_example.json "$corpus/" ;;
    fuzz_safetensors) printf '\x00\x00' > "$corpus/empty" ;;
    fuzz_deepspeed) cp tests/data/deepspeed/*.json "$corpus/" ;;
    fuzz_settings) cp tests/data/fuzz_seeds/settings/*.json "$corpus/" ;;
    fuzz_plan) cp tests/data/fuzz_seeds/plan/*.json "$corpus/" ;;
    fuzz_run_state) cp tests/data/fuzz_seeds/run_state/*.json "$corpus/" ;;
    fuzz_torchtune) cp tests/data/torchtune/*.yaml tests/data/accelerate/*.yaml "$corpus/" ;;
    fuzz_hf_trainer) cp tests/data/hf_trainer/* tests/data/axolotl/*.yml tests/data/llamafactory/*.yaml "$corpus/" ;;
    fuzz_torchtune_set) printf 'batch_size=4\noptimizer.fused=True\n~tokenizer.max_seq_len\n' > "$corpus/overrides" ;;
    fuzz_mmengine_dump) cp tests/data/xtuner/*.dump.json tests/data/mmpretrain/*.dump.json "$corpus/" ;;
  esac
}

status=0
for target in "${targets[@]}"; do
  [ -n "${sources[$target]+set}" ] || { echo "fuzz.sh: unknown target $target" >&2; exit 2; }
  echo "== $target: building"
  # shellcheck disable=SC2086
  read -r -a linked <<< "$(objects ${sources[$target]})"
  # shellcheck disable=SC2086
  clang++ "${common[@]}" -fsanitize=fuzzer "${sanitizers[@]}" "tests/fuzz/$target.cc" "${linked[@]}" \
    ${libraries[$target]:-} -o "$build/$target"
  corpus=out/fuzz/$target/corpus
  crashes=out/fuzz/$target/crashes
  mkdir -p "$corpus" "$crashes"
  seed "$target" "$corpus"
  regressions=tests/data/fuzz_regressions/$target
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    echo "== $target: replaying $(ls "$regressions" | wc -l) regression inputs"
    "$build/$target" "$regressions"/* || status=1
  fi
  echo "== $target: fuzzing for ${seconds}s"
  if ! "$build/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$crashes/" "$corpus" 2>"out/fuzz/$target/log.txt"; then
    echo "== $target: FAILED, see out/fuzz/$target/log.txt and $crashes/" >&2
    status=1
  fi
  tail -1 "out/fuzz/$target/log.txt"
done
exit $status
