#!/usr/bin/env bash
# Installs the PyTorch exporter's pinned packages (scripts/exporter/requirements.txt:
# torch, transformers, diffusers) into .venv from PyPI. Idempotent: nothing is
# downloaded when the pinned versions are already there. Run after
# scripts/setup_torch.sh, which creates .venv with the same torch.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=scripts/exporter/requirements.txt
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# "name==version" lines -> one check that every pin is installed as pinned.
if ! .venv/bin/python - "$requirements" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, pinned = line.split("==")
    if version(name).split("+")[0] != pinned:
        sys.exit(1)
PY
then
  echo "setup_exporter: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into .venv" >&2
  scripts/pip_install.sh .venv -r "$requirements"
fi
