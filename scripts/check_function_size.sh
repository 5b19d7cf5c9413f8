#!/usr/bin/env bash
# CTest test style/function_size (label style): no function in planner/ or cli/
# longer than the house limit, 60 lines (STYLE.md). clang-tidy runs only
# readability-function-size; its LineThreshold comes from .clang-tidy, so the
# limit is written once. Any warning, or any file clang-tidy cannot parse, fails.
#   scripts/check_function_size.sh SOURCE_DIR BUILD_DIR [FILE...]
# BUILD_DIR holds compile_commands.json (the top CMakeLists.txt always exports
# it). Files the build does not compile here (the trainer's, built only with
# LibTorch, but torch-free) get the flags of their nearest neighbour: clang-tidy
# infers them from the database. FILEs, when given, replace the tree's list.
# CLANG_TIDY names another clang-tidy (default: the one on PATH).
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
shift 2
tidy=${CLANG_TIDY:-clang-tidy}
cd "$source_dir"

# Not checked, each with its reason:
#  - cli/python/: the nanobind module, compiled only by `pip install .`, whose
#    nanobind headers this build does not have.
excluded='^(cli/python/)'

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find planner cli -name '*.cc' | LC_ALL=C sort | grep -Ev "$excluded")
fi
[ ${#files[@]} -gt 0 ] || { echo "check_function_size: no files to check" >&2; exit 1; }

start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# A function's length depends on its file's text alone, so a file that passed
# with the same text, the same .clang-tidy and the same clang-tidy passes again:
# those are skipped. The record lives beside ccache's, outside the checkout, so
# a fresh clone of an unchanged tree skips them too (issue 34: keep caches
# between runs); HEADROOM_STYLE_CACHE names another file. Only passes are
# recorded, and only when every file passed.
passed=${HEADROOM_STYLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headroom/function_size_passed.txt}
mkdir -p "$(dirname "$passed")"
setting=$({ "$tidy" --version; cat .clang-tidy; } | sha256sum | cut -c1-16)
declare -A keys
to_check=()
for file in "${files[@]}"; do
  keys[$file]="$setting-$(sha256sum <"$file" | cut -c1-16)"
  grep -qxF "${keys[$file]} $file" "$passed" 2>/dev/null || to_check+=("$file")
done

# One file a clang-tidy, as many at once as there are cores.
status=0
if [ ${#to_check[@]} -gt 0 ]; then
  printf '%s\n' "${to_check[@]}" |
    xargs -P "$(nproc)" -n 1 "$tidy" -p "$build_dir" --quiet --checks='-*,readability-function-size' \
          --warnings-as-errors='*' >"$log" 2>&1 || status=$?
fi
# clang-tidy's "N warnings generated." counts only suppressed header noise.
if [ "$status" -ne 0 ] || grep -qE '(warning|error):' "$log"; then
  grep -vE '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' "$log" >&2 || true
  echo "check_function_size: FAILED: a function over the limit, or a file clang-tidy could not read" >&2
  exit 1
fi
# Earlier records stay (other checkouts share the file); the newest 20000
# lines are kept, written to a temporary file and renamed (atomic).
tmp=$(mktemp "$passed.XXXXXX")
{ cat "$passed" 2>/dev/null || true; for file in "${files[@]}"; do echo "${keys[$file]} $file"; done; } |
  awk '!seen[$0]++' | tail -n 20000 >"$tmp"
mv "$tmp" "$passed"
echo "check_function_size: ${#files[@]} files (${#to_check[@]} read now, the rest unchanged since they passed)," \
     "no function over the limit ($(( $(date +%s) - start )) s)"
