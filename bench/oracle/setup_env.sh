#!/usr/bin/env bash
# Creates the oracle's pinned environment NAME (bench/oracle/envs/NAME.txt) in
# .venv-oracle/NAME. Each environment holds only the stack's packages at the
# versions it pins; torch comes from the project's .venv (scripts/setup_torch.sh),
# through a .pth file, so every environment runs the same torch 2.11.0 and none
# downloads it again. Idempotent: nothing is installed when the pins are there.
# Once every pin imports as pinned (torch included), the pins are copied to
# .venv-oracle/NAME/headroom-pins.txt: the tests run only in a stamped environment.
# A pin whose comment starts with "no-deps" is installed without its dependencies
# (pip --no-deps): torchvision pins torch==2.11.0 exactly, and pip would otherwise
# fetch a second torch into the environment; what it needs besides is pinned below it.
#   bench/oracle/setup_env.sh hf5
set -euo pipefail
cd "$(dirname "$0")/../.."
name="${1:?usage: bench/oracle/setup_env.sh NAME (bench/oracle/envs/NAME.txt)}"
pins="bench/oracle/envs/$name.txt"
[ -f "$pins" ] || { echo "setup_env: $pins: no such environment" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "setup_env: .venv/bin/python missing (scripts/setup_torch.sh)" >&2; exit 2; }
env_dir=".venv-oracle/$name"
# DeepSpeed (envs/ds.txt) is a source package: build none of its C++/CUDA ops at install
# (they would need nvcc and a GPU's headers; the oracle runs torch's optimizers)
export DS_BUILD_OPS=0
rm -f "$env_dir/headroom-pins.txt"  # re-stamped below only when the install is whole
if [ ! -x "$env_dir/bin/python" ]; then
  # uv (scripts/pip_install.sh puts it into .venv) makes the environment without pip in
  # it, in milliseconds; python3's venv runs ensurepip, about 5 s of CPU for each one.
  if [ -x .venv/bin/uv ]; then
    .venv/bin/uv venv -q --python "$(command -v python3)" "$env_dir"
  else
    python3 -m venv "$env_dir"
  fi
fi
base_site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
env_site="$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$base_site" > "$env_site/headroom_base_torch.pth"
if ! "$env_dir/bin/python" - "$pins" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, pinned = line.split("==")
        if version(name).split("+")[0] != pinned:
            sys.exit(1)
PY
then
  echo "setup_env: installing $(tr '\n' ' ' < "$pins")into $env_dir" >&2
  no_deps="$(sed -n 's/^[[:space:]]*\([^#[:space:]]*\)[[:space:]]*#[[:space:]]*no-deps.*/\1/p' "$pins")"
  with_deps="$(grep -v '#[[:space:]]*no-deps' "$pins" || true)"
  if [ -n "$with_deps" ]; then
    requirements=$(mktemp)
    printf '%s\n' "$with_deps" >"$requirements"
    scripts/pip_install.sh "$env_dir" --torch-from-base -r "$requirements"
    rm -f "$requirements"
  fi
  if [ -n "$no_deps" ]; then
    scripts/pip_install.sh "$env_dir" --no-deps --torch-from-base $no_deps
  fi
fi
"$env_dir/bin/python" -c 'import torch' \
  || { echo "setup_env: $env_dir cannot import torch (from .venv, scripts/setup_torch.sh)" >&2; exit 1; }
cp "$pins" "$env_dir/headroom-pins.txt"
