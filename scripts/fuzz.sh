#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UBSan) and runs each for a
# bounded time: FUZZ_SECONDS (default 60) per target. Seeds come from tests/data;
# crashes are written to out/fuzz/<target>/ and the script fails. Inputs that once
# crashed are kept in tests/data/fuzz_regressions/<target>/ and replayed first.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ missing (apt-get install clang)" >&2; exit 2; }
build=out/fuzz/build
mkdir -p "$build"
flags=(-std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
graph_sources=(graph/dtype.cc graph/size_expr.cc graph/layer_graph.cc graph/validate.cc graph/graph_json.cc graph/json_text.cc
               graph/atomic_file.cc graph/graph_analysis.cc graph/safetensors_header.cc)
model_sources=(models/*.cc)
declare -A targets=(
  [fuzz_graph_json]="tests/fuzz/fuzz_graph_json.cc ${graph_sources[*]}"
  [fuzz_safetensors]="tests/fuzz/fuzz_safetensors.cc ${graph_sources[*]}"
  [fuzz_measurement]="tests/fuzz/fuzz_measurement.cc planner/measurement.cc ${graph_sources[*]}"
  [fuzz_hf_config]="tests/fuzz/fuzz_hf_config.cc ${graph_sources[*]} ${model_sources[*]}"
)
status=0
for target in fuzz_graph_json fuzz_safetensors fuzz_hf_config fuzz_measurement; do
  echo "== $target: building"
  # shellcheck disable=SC2086
  clang++ "${flags[@]}" ${targets[$target]} -o "$build/$target"
  corpus=out/fuzz/$target/corpus
  crashes=out/fuzz/$target/crashes
  mkdir -p "$corpus" "$crashes"
  case $target in
    fuzz_graph_json) cp tests/data/*.json "$corpus/" 2>/dev/null || true ;;
    fuzz_hf_config) for f in tests/data/hf/*/config.json; do cp "$f" "$corpus/$(basename "$(dirname "$f")").json"; done ;;
    fuzz_measurement) cp tests/data/measurement_example.json "$corpus/" ;;
    fuzz_safetensors) printf '\x00\x00' > "$corpus/empty" ;;
  esac
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
