#!/usr/bin/env bash
# Loads an HTML report in headless Chromium (Debian's `chromium`) and fails when
# the page refers to anything outside itself (it must open offline), when it
# logs any console message (errors, uncaught exceptions), when a chart or a
# section (the comparison, the assumptions, the flags, the frontier table) is
# missing from the rendered DOM, or when the screenshot is blank.
# Console messages reach Chromium's stderr log as "CONSOLE" lines with
# --enable-logging=stderr; a failed load of a missing file does not, which is
# why references to other files are refused before the page is loaded.
# Exit status: 0 ok, 1 the page failed a check, 2 bad usage or no chromium.
# Usage: scripts/check_report_in_browser.sh REPORT.html [SCREENSHOT.png]
set -euo pipefail
report=${1:?usage: check_report_in_browser.sh REPORT.html [SCREENSHOT.png]}
shot=${2:-$(mktemp --suffix=.png)}
[ -f "$report" ] || { echo "check_report_in_browser: $report: no such file" >&2; exit 2; }
command -v chromium >/dev/null || { echo "check_report_in_browser: chromium not installed (apt-get install chromium)" >&2; exit 2; }
url="file://$(realpath "$report")"

# Self-contained: no scripts or styles from files (inline ones are fine), no images, frames or fonts, no links out.
if grep -EnIio '<(link|img|iframe|object|embed|audio|video|source)[[:space:]>]|[[:space:]](src|href)=|url\(|@import' \
     "$report" | head -5 | grep . >&2; then
  echo "check_report_in_browser: $report refers to other files or the network (shown above); it must be self-contained" >&2
  exit 1
fi
flags=(--headless=new --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr --v=0)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

timeout 120 chromium "${flags[@]}" --dump-dom "$url" >"$work/dom.html" 2>"$work/log.txt" || {
  echo "check_report_in_browser: chromium failed to load $report" >&2; tail -5 "$work/log.txt" >&2; exit 1; }
if grep -q "CONSOLE" "$work/log.txt"; then
  echo "check_report_in_browser: console messages while loading $report:" >&2
  grep "CONSOLE" "$work/log.txt" >&2
  exit 1
fi
# The charts, and what the answer says to do (issue 36): the run beside the fastest
# plan, the assumptions, the flags to apply, the frontier's labelled points.
for chart in chart-breakdown chart-memory chart-frontier chart-blocks chart-timeline \
             table-comparison list-assumptions pre-flags table-frontier; do
  grep -q "id=\"$chart\"" "$work/dom.html" || { echo "check_report_in_browser: $chart missing from the rendered page" >&2; exit 1; }
done

timeout 120 chromium "${flags[@]}" --window-size=1200,3600 --screenshot="$shot" "$url" 2>>"$work/log.txt" >/dev/null
# Not blank: the screenshot must hold many distinct colours (charts, text).
python3 - "$shot" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width, height, colour_type = 8, b"", 0, 0, 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    chunk = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour_type = struct.unpack(">IIBB", chunk[:10])
    elif kind == b"IDAT":
        idat += chunk
    pos += 12 + length
raw = zlib.decompress(idat)
channels = {2: 3, 6: 4}.get(colour_type, 1)
stride = width * channels + 1
colours = set()
for row in range(0, height, 7):  # every 7th row, unfiltered bytes are enough to count variety
    line = raw[row * stride + 1:(row + 1) * stride]
    for x in range(0, len(line) - channels, channels * 5):
        colours.add(line[x:x + channels])
if len(colours) < 50:
    sys.exit(f"check_report_in_browser: screenshot looks blank ({len(colours)} distinct colours)")
print(f"check_report_in_browser: ok, {width}x{height} screenshot, {len(colours)} distinct colours, no console messages")
PY
