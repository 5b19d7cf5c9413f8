#!/usr/bin/env bash
# Installs the pinned LibTorch (PyPI torch==2.11.0, CUDA 13 build) into .venv for
# the optional executor, and prints the CMake prefix path. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.11.0
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ "$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)" != "$version" ]; then
  echo "setup_torch: installing torch==$version into .venv (about 5 GB)" >&2
  scripts/pip_install.sh .venv "torch==$version"
fi
.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'
