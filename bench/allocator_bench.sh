#!/usr/bin/env bash
# glibc's malloc against mimalloc on the same binary, in the same run: the MoE plan
# search of bench/moe_search_bench (linked with glibc's malloc), once as built and once
# with mimalloc preloaded, which is what the `headroom` command links (CMakeLists.txt,
# HEADROOM_WITH_MIMALLOC). Prints each run's CPU seconds and the ratio; the two runs
# must print the same answers.
# Usage: bench/allocator_bench.sh [BUILD_DIR] [config.json] [gpu_mem_gib]
set -euo pipefail
build=${1:-build}
bench="$build/bench/moe_search_bench"
shift || true
args=("$@")  # the bench's own: config.json, GPU GiB
mimalloc=$(ldconfig -p | awk '/libmimalloc\.so\.2 /{print $NF; exit}')
if [ ! -x "$bench" ]; then echo "allocator_bench: $bench not built (ninja -C $build moe_search_bench)" >&2; exit 1; fi
if [ -z "$mimalloc" ]; then echo "allocator_bench: libmimalloc.so.2 not found (Debian libmimalloc2.0)" >&2; exit 1; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu_seconds() {  # NAME ENV...: the bench under `env ENV...`, answers to $out/NAME.txt, user+system seconds out
  local name=$1; shift
  local TIMEFORMAT='%U %S'
  { time env "$@" "$bench" "${args[@]}" >"$out/$name.txt"; } 2>&1 | awk '{print $1 + $2}'
}
glibc=$(cpu_seconds glibc)
mi=$(cpu_seconds mimalloc LD_PRELOAD="$mimalloc")
# The bench's own timings differ between the runs; its answers must not.
if ! diff <(grep -v ' s' "$out/glibc.txt") <(grep -v ' s' "$out/mimalloc.txt") >/dev/null; then
  echo "allocator_bench: the two allocators gave different answers" >&2
  diff "$out/glibc.txt" "$out/mimalloc.txt" >&2 || true
  exit 1
fi
cat "$out/mimalloc.txt"
printf 'CPU seconds: glibc malloc %.2f, mimalloc %.2f (%s), ratio %.2fx\n' "$glibc" "$mi" "$mimalloc" \
  "$(awk -v a="$glibc" -v b="$mi" 'BEGIN{print a / b}')"
