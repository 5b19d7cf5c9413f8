#!/usr/bin/env bash
# CTest "browser" check: plan the built-in example, write its HTML report with a
# measurement overlay, and load it in headless Chromium (check_report_in_browser.sh).
# Usage: scripts/test_report_in_browser.sh HEADROOM_BINARY WORK_DIR
set -euo pipefail
headroom=${1:?usage: test_report_in_browser.sh HEADROOM_BINARY WORK_DIR}
work=${2:?usage: test_report_in_browser.sh HEADROOM_BINARY WORK_DIR}
here=$(dirname "$0")
mkdir -p "$work"
"$headroom" plan flux-kontext-dev --gpu a6000 --lora --resolution 1024 -o "$work/browser_plan.json" >/dev/null
"$headroom" report "$work/browser_plan.json" -o "$work/browser_report.html" \
  --measurement "$here/../tests/data/measurement_example.json" >/dev/null
"$here/check_report_in_browser.sh" "$work/browser_report.html" "$work/browser_report.png"
