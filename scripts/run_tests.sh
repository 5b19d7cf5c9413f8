#!/usr/bin/env bash
# Builds everything and runs every test suite (graph, models, planner, reports, cli).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-browser
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" 
