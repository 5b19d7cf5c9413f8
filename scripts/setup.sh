#!/usr/bin/env bash
# Installs headroom's build dependencies from Debian packages (idempotent).
set -euo pipefail
packages=(cmake ninja-build ccache g++ libboost-graph-dev nlohmann-json3-dev libeigen3-dev doctest-dev libcli11-dev libyaml-dev libgloo-dev libmimalloc-dev clang-tidy)
# --with-browser: also Chromium, for the headless check of the HTML report.
[ "${1:-}" = "--with-browser" ] && packages+=(chromium)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "headroom setup: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
