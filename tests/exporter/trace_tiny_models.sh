#!/usr/bin/env bash
# CTest fixture of exporter/crosscheck: traces the tiny zoo families on CPU
# into OUT_DIR (scripts/exporter/crosscheck.py). Exit 77 (skip) without the
# exporter's Python packages in .venv (scripts/setup_exporter.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$1"
rm -rf "$out"  # never compare against traces of an earlier run
python="$root/.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "trace_tiny_models: skipped: no $python (scripts/setup_exporter.sh)"
  exit 77
fi
exec "$python" "$root/scripts/exporter/crosscheck.py" "$out"
