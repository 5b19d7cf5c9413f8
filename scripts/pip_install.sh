#!/usr/bin/env bash
# Installs Python requirements into a virtual environment, with uv (a pinned
# release, put into .venv by pip) when it can, else with the environment's pip.
#   scripts/pip_install.sh ENV_DIR [--no-deps] [--torch-from-base] REQUIREMENT... | -r FILE
# Why uv: pip here re-downloads torch's 5 GB for every fresh clone (its HTTP
# cache keeps nothing), so setting up a clone took about 9 minutes; uv keeps
# wheels in its own cache (~/.cache/uv) and links them into the environment, so
# a second clone installs the same pins in seconds (issue 34: keep caches between runs).
# --torch-from-base: the environment takes torch from .venv through a .pth file
# (bench/oracle/setup_env.sh). pip sees that torch and installs no other; uv does
# not look through .pth files, so torch is overridden out of uv's resolution
# (a marker that is never true) and the pins resolve against .venv's torch as with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
uv_version=0.13.9
env_dir="${1:?usage: scripts/pip_install.sh ENV_DIR [--no-deps] [--torch-from-base] REQUIREMENT...}"
shift
no_deps=() torch_from_base=false
while [ $# -gt 0 ]; do
  case "$1" in
    --no-deps) no_deps=(--no-deps); shift ;;
    --torch-from-base) torch_from_base=true; shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "pip_install: no requirements given" >&2; exit 2; }

uv=.venv/bin/uv
if [ ! -x "$uv" ] && [ -x .venv/bin/pip ]; then
  .venv/bin/pip install -q "uv==$uv_version" >/dev/null 2>&1 || true
fi
if [ -x "$uv" ]; then
  # pip reads the system's certificate bundle (PIP_CERT); uv does so with native TLS.
  export UV_NATIVE_TLS="${UV_NATIVE_TLS:-1}" UV_HTTP_TIMEOUT="${UV_HTTP_TIMEOUT:-${PIP_DEFAULT_TIMEOUT:-180}}"
  overrides=()
  if $torch_from_base; then
    overrides_file=$(mktemp)
    trap 'rm -f "$overrides_file"' EXIT
    echo "torch; sys_platform == 'never'" >"$overrides_file"
    overrides=(--overrides "$overrides_file")
  fi
  if "$uv" pip install -q --python "$env_dir/bin/python" "${no_deps[@]}" "${overrides[@]}" "$@"; then
    exit 0
  fi
  echo "pip_install: uv could not install $* into $env_dir; trying pip" >&2
fi
# An environment uv made has no pip in it (bench/oracle/setup_env.sh).
[ -x "$env_dir/bin/pip" ] || "$env_dir/bin/python" -m ensurepip -q
"$env_dir/bin/pip" install -q "${no_deps[@]}" "$@"
