#!/usr/bin/env bash
# Runs every command of README.md's "Everyday use" block as written, from a
# scratch folder that sees the repository's build/, tests/, scripts/ and .venv
# (so files the commands write land there, not in the checkout). Fails on the
# first command that exits non-zero, printing it and its output.
#   scripts/check_readme_commands.sh [REPO [BUILD]]   (CTest: cli/readme_commands)
# BUILD (default REPO/build) is what the commands' build/ means.
# `headroom run` lines need the trainer (a LibTorch build) and the exporter line
# and the --xtuner/--mmengine lines need transformers and mmengine in .venv
# (scripts/setup_exporter.sh): without them those
# lines are skipped and named.
set -euo pipefail
repo="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
build="$(cd "${2:-$repo/build}" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
ln -s "$build" "$scratch/build"
for entry in tests scripts .venv; do
  if [ -e "$repo/$entry" ]; then ln -s "$repo/$entry" "$scratch/$entry"; fi
done

# The block between "## Everyday use" and the next heading, its command lines
# (the comment after two spaces and a '#' dropped).
mapfile -t commands < <(awk '/^## Everyday use/{on=1; next} /^## /{on=0} on' "$repo/README.md" |
                        grep -E '^(build/cli/headroom|\.venv/bin/python) ' | sed -E 's/ +# .*$//')
[ "${#commands[@]}" -gt 0 ] || { echo "check_readme_commands: no commands found in $repo/README.md" >&2; exit 1; }

has_trainer=0
[ -x "$build/cli/headroom-train" ] && has_trainer=1
has_exporter=0
"$repo/.venv/bin/python" -c 'import transformers' 2>/dev/null && has_exporter=1
has_mmengine=0
"$repo/.venv/bin/python" -c 'import mmengine' 2>/dev/null && has_mmengine=1

ran=0
skipped=0
cd "$scratch"
for command in "${commands[@]}"; do
  if [[ $command == "build/cli/headroom run "* && $has_trainer == 0 ]]; then
    echo "skipped (no headroom-train in this build): $command"; skipped=$((skipped + 1)); continue
  fi
  if [[ $command == ".venv/bin/python "* && $has_exporter == 0 ]]; then
    echo "skipped (no transformers in .venv): $command"; skipped=$((skipped + 1)); continue
  fi
  if [[ $command =~ --(xtuner|mmengine)\  && $has_mmengine == 0 ]]; then
    echo "skipped (no mmengine in .venv): $command"; skipped=$((skipped + 1)); continue
  fi
  if ! output=$(bash -c "$command" 2>&1 </dev/null); then
    echo "check_readme_commands: FAILED: $command" >&2
    echo "$output" | tail -20 >&2
    exit 1
  fi
  ran=$((ran + 1))
done
echo "check_readme_commands: ${ran} README commands ran as written, ${skipped} skipped"
